"""Retention and archive of execution history and logs.

Two paths, same guarantee (exported, verified by row count, then deleted):
- whole monthly partitions (PostgreSQL): a partition that ended before the cutoff is detached
  (no new rows can land in it), exported, verified, dropped. Cheap: no row-by-row delete, no
  bloat. Used for the part of history every tenant's retention has passed.
- rows in batches (the default partition, tenants with a shorter period than the
  longest, and execution logs): select a batch, export, verify, delete exactly those rows.

Per-tenant periods: `Tenant.retention_days` (default 90). History is kept at least that long.
The tenants with the longest period lose their runs a whole month at a time,
when the month's partition has passed their period; shorter periods are cut by rows.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.db import connection, transaction
from django.utils import timezone

from data_lifecycle.services.archive_store import ArchiveFile, ArchiveStore
from data_lifecycle.services.parquet_archive import schema_for, select_list
from scheduler_app import partitions
from scheduler_app.models import ExecutionLog, ExecutionLoss, TaskExecution, Tenant
from scheduler_app.services.log_quota import log_bytes_release

logger = logging.getLogger(__name__)


@dataclass
class ArchiveReport:
    files: list[ArchiveFile] = field(default_factory=list)
    rows: int = 0
    partitions_dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def merge(self, other: ArchiveReport) -> None:
        self.files += other.files
        self.rows += other.rows
        self.partitions_dropped += other.partitions_dropped
        self.seconds += other.seconds


@dataclass(frozen=True)
class _Table:
    kind: str  # "executions" | "logs"
    table: str
    time_column: str
    key_columns: tuple[str, ...]
    json_columns: frozenset[str]
    # What an archive holds: every column but derived search data (a log's stored words,
    # as large as its text and rebuilt from it by PostgreSQL when a log is written).
    columns: str


def _table(model, *, kind: str, time_column: str, key_columns: tuple[str, ...]) -> _Table:
    json_columns = frozenset(
        f.column for f in model._meta.concrete_fields if f.get_internal_type() == "JSONField"
    )
    columns = ", ".join(
        f.column for f in model._meta.concrete_fields if not isinstance(f, SearchVectorField)
    )
    return _Table(kind, model._meta.db_table, time_column, key_columns, json_columns, columns)


EXECUTIONS = _table(
    TaskExecution, kind="executions", time_column="scheduled_at", key_columns=("id",)
)
LOGS = _table(ExecutionLog, kind="logs", time_column="created_at", key_columns=("execution_id",))


def _stamp(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"


def _decode(row: dict[str, Any], json_columns: frozenset[str]) -> dict[str, Any]:
    # Django's PostgreSQL backend loads jsonb as text (its JSONField decodes it); a raw
    # cursor gets that text.
    for column in json_columns:
        value = row.get(column)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                row[column] = json.loads(value)
    return row


def _rows(cursor, json_columns: frozenset[str]):
    names = [col[0] for col in cursor.description]
    while True:
        batch = cursor.fetchmany(5000)
        if not batch:
            return
        for values in batch:
            yield _decode(dict(zip(names, values, strict=True)), json_columns)


# --- whole partitions ---------------------------------------------------------------------


def partition_archive(
    *,
    partition: partitions.Partition,
    store: ArchiveStore,
    now: datetime,
    already_detached: bool = False,
) -> ArchiveFile:
    """Detach, export, verify, drop one monthly partition. Re-attached if anything fails."""
    if not already_detached:
        with transaction.atomic():
            partitions.partition_detach(name=partition.name)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {partition.name}")
            expected = cursor.fetchone()[0]
        archived = store.write_parquet(
            name=f"executions-{partition.name.removeprefix(partitions.PARTITION_PREFIX)}"
            f"-{_stamp(now)}",
            json_lines=_copy_json_lines(
                f"SELECT {select_list(TaskExecution)} FROM {partition.name}"
            ),
            schema=schema_for(TaskExecution),
            expected=expected,
            meta={
                "kind": "executions",
                "partition": partition.name,
                "from": partition.start,
                "to": partition.end,
                "archived_at": now,
            },
        )
    except BaseException:
        with transaction.atomic():
            partitions.partition_attach(partition=partition)
        raise
    with transaction.atomic():
        partitions.partition_drop(name=partition.name)
    logger.info("archived and dropped %s (%d rows)", partition.name, archived.rows)
    return archived


def _copy_json_lines(select: str):
    """Stream `select` out of PostgreSQL as JSON lines (row_to_json, COPY): no per-row Python.

    CSV with a quote and delimiter that never occur in JSON text means COPY neither quotes
    nor escapes anything, so every line is exactly the row's JSON.
    """
    sql = (
        f"COPY (SELECT row_to_json(r)::text FROM ({select}) r) TO STDOUT "
        "WITH (FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02')"
    )
    with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for data in copy:
            yield bytes(data)


def _archive_partitions_before(
    cutoff: datetime, store: ArchiveStore, now: datetime
) -> ArchiveReport:
    """Whole partitions ending by `cutoff`, plus any left detached by an interrupted run."""
    report = ArchiveReport()
    work = [(p, True) for p in partitions.partitions_detached()]
    work += [
        (p, False) for p in partitions.partitions_list() if p.end is not None and p.end <= cutoff
    ]
    for partition, detached in work:
        archived = partition_archive(
            partition=partition, store=store, now=now, already_detached=detached
        )
        report.files.append(archived)
        report.rows += archived.rows
        report.partitions_dropped.append(partition.name)
    return report


# --- rows in batches ----------------------------------------------------------------------


def rows_archive(
    *,
    spec: _Table,
    before: datetime,
    tenant_ids: Sequence[uuid.UUID] | None,
    store: ArchiveStore,
    now: datetime,
    batch_rows: int | None = None,
) -> ArchiveReport:
    """Export and delete rows with `time_column < before` (of `tenant_ids`, or all) in batches."""
    report = ArchiveReport()
    batch_rows = batch_rows or settings.LIFECYCLE["ARCHIVE_BATCH_ROWS"]
    if tenant_ids is not None and not tenant_ids:
        return report
    where = f"{spec.time_column} < %s"
    params: list[Any] = [before]
    if tenant_ids is not None:
        where += " AND tenant_id IN (" + ", ".join(["%s"] * len(tenant_ids)) + ")"
        params += [_db_uuid(t) for t in tenant_ids]
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {spec.columns} FROM {spec.table} WHERE {where} "
                f"ORDER BY {spec.time_column} LIMIT {int(batch_rows)}",
                params,
            )
            rows = list(_rows(cursor, spec.json_columns))
            if not rows:
                return report
            # Executions as Parquet, like the partitions; logs (text) as JSON Lines.
            write = (
                partial(store.write_parquet, schema=schema_for(TaskExecution))
                if spec.kind == "executions"
                else store.write
            )
            archived = write(
                name=f"{spec.kind}-rows-{_stamp(now)}",
                rows=rows,
                expected=len(rows),
                meta={
                    "kind": spec.kind,
                    "before": before,
                    "tenants": [str(t) for t in tenant_ids] if tenant_ids else "all",
                    "from": rows[0][spec.time_column],
                    "to": rows[-1][spec.time_column],
                    "archived_at": now,
                },
            )
            deleted = _delete_rows(cursor, spec, rows, before=before)
            if spec.kind == "logs":
                transaction.on_commit(lambda rows=rows: log_bytes_release(rows))
            if deleted != len(rows):
                # Rows vanished under us (another archiver): the file holds a superset,
                # which is harmless; say so rather than pretend.
                logger.warning(
                    "%s: archived %d rows, deleted %d", archived.name, len(rows), deleted
                )
        report.files.append(archived)
        report.rows += archived.rows
        if len(rows) < batch_rows:
            return report


def _db_uuid(value: Any) -> Any:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _delete_rows(cursor, spec: _Table, rows: list[dict[str, Any]], *, before: datetime) -> int:
    deleted = 0
    key = spec.key_columns[0]
    for start in range(0, len(rows), 1000):
        chunk = rows[start : start + 1000]
        holes = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            # The time bound lets PostgreSQL prune partitions.
            f"DELETE FROM {spec.table} WHERE {spec.time_column} < %s AND {key} IN ({holes})",
            [before, *(row[key] for row in chunk)],
        )
        deleted += cursor.rowcount
    return deleted


# --- entry points -------------------------------------------------------------------------


def executions_archive(
    *,
    before: datetime,
    tenant_ids: Sequence[uuid.UUID] | None = None,
    store: ArchiveStore | None = None,
    now: datetime | None = None,
) -> ArchiveReport:
    """Archive then delete every execution scheduled before `before` (of the given tenants).

    Whole partitions that end by `before` go in one piece (only when no tenant filter is
    given); the rest row by row.
    """
    started = time.monotonic()
    store = store or ArchiveStore()
    now = now or timezone.now()
    report = ArchiveReport()
    if tenant_ids is None:
        report.merge(_archive_partitions_before(before, store, now))
    report.merge(
        rows_archive(spec=EXECUTIONS, before=before, tenant_ids=tenant_ids, store=store, now=now)
    )
    report.seconds = time.monotonic() - started
    return report


def logs_archive(
    *,
    before: datetime,
    tenant_ids: Sequence[uuid.UUID] | None = None,
    store: ArchiveStore | None = None,
    now: datetime | None = None,
) -> ArchiveReport:
    started = time.monotonic()
    report = rows_archive(
        spec=LOGS,
        before=before,
        tenant_ids=tenant_ids,
        store=store or ArchiveStore(),
        now=now or timezone.now(),
    )
    report.seconds = time.monotonic() - started
    return report


def retention_apply(
    *, now: datetime | None = None, store: ArchiveStore | None = None
) -> ArchiveReport:
    """Apply every tenant's retention period to executions and logs."""
    now = now or timezone.now()
    store = store or ArchiveStore()
    started = time.monotonic()
    report = ArchiveReport()
    periods: dict[int, list[uuid.UUID]] = {}
    for tenant_id, days in Tenant.objects.values_list("id", "retention_days"):
        periods.setdefault(int(days), []).append(tenant_id)
    if not periods:
        return report
    longest = max(periods)
    global_cutoff = now - timedelta(days=longest)
    if partitions.is_partitioned():
        report.merge(_archive_partitions_before(global_cutoff, store, now))
    for days, tenant_ids in sorted(periods.items()):
        cutoff = now - timedelta(days=days)
        if days < longest or not partitions.is_partitioned():
            report.merge(
                rows_archive(
                    spec=EXECUTIONS, before=cutoff, tenant_ids=tenant_ids, store=store, now=now
                )
            )
        else:
            # Longest period on PostgreSQL: only rows stranded in the default partition.
            report.merge(_default_partition_archive(cutoff, tenant_ids, store, now))
        report.merge(
            rows_archive(spec=LOGS, before=cutoff, tenant_ids=tenant_ids, store=store, now=now)
        )
        # A run's worker losses go with its history (not archived: the run's row, archived
        # above, keeps how it ended; the losses are for the live investigation).
        ExecutionLoss.objects.filter(tenant_id__in=tenant_ids, lost_at__lt=cutoff).delete()
    report.seconds = time.monotonic() - started
    return report


def _default_partition_archive(
    cutoff: datetime, tenant_ids: list[uuid.UUID], store: ArchiveStore, now: datetime
) -> ArchiveReport:
    spec = _Table(
        "executions",
        partitions.DEFAULT_PARTITION,
        "scheduled_at",
        ("id",),
        EXECUTIONS.json_columns,
        EXECUTIONS.columns,
    )
    return rows_archive(spec=spec, before=cutoff, tenant_ids=tenant_ids, store=store, now=now)
