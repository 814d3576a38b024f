"""Executions archives are Parquet (one file per partition, the documented schema); restore
reads Parquet and the JSON Lines archives written before, row for row."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.utils.dateparse import parse_datetime

from data_lifecycle.models import RestoredExecution
from data_lifecycle.services.archive_store import ArchiveStore
from data_lifecycle.services.restore import executions_restore
from data_lifecycle.services.retention import executions_archive
from scheduler_app import partitions
from scheduler_app.models import TaskExecution
from tests.factories import make_task

pytestmark = pytest.mark.django_db

COMPARED = (
    "id",
    "tenant_id",
    "task_id",
    "status",
    "trigger",
    "priority",
    "queue",
    "attempt",
    "max_attempts",
    "root_execution_id",
    "worker_id",
    "parameters",
    "result",
    "exit_code",
    "error_message",
    "error_class",
    "dead_lettered",
    "progress",
)
TIMES = ("scheduled_at", "queued_at", "started_at", "completed_at", "dead_lettered_at")


def _varied_runs(task, start: datetime, count: int) -> list[TaskExecution]:
    rows = []
    for i in range(count):
        when = start + timedelta(hours=5 * i, microseconds=i * 137)
        failed = i % 3 == 0
        rows.append(
            TaskExecution(
                id=uuid.uuid4(),
                tenant_id=task.tenant_id,
                task=task,
                status="failed" if failed else "success",
                trigger="schedule" if i % 2 else "manual",
                priority=1 + i % 10,
                queue="normal",
                scheduled_at=when,
                queued_at=when,
                started_at=when + timedelta(seconds=1),
                completed_at=None if i == 1 else when + timedelta(seconds=3, microseconds=5),
                attempt=1 + i % 3,
                max_attempts=3,
                root_execution_id=uuid.uuid4() if i % 4 == 0 else None,
                worker_id=f"w-{i % 2}",
                parameters={"n": i, "nested": {"list": [1, "two", None]}} if i % 5 else None,
                result={"ok": not failed, "unicode": "é✓"} if not failed else None,
                exit_code=1 if failed else 0,
                error_message='boom "quoted"\nsecond line' if failed else "",
                error_class="exception:RuntimeError" if failed else "",
                dead_lettered=failed and i % 2 == 0,
                dead_lettered_at=when + timedelta(seconds=4) if failed and i % 2 == 0 else None,
                progress={"percent": 50.5, "message": "half", "updated_at": "x"}
                if i == 2
                else None,
            )
        )
    return TaskExecution.objects.bulk_create(rows)


def _same_time(restored: object, original: datetime | None) -> bool:
    if original is None:
        return restored is None
    return parse_datetime(str(restored)) == original


def test_a_partition_is_archived_as_parquet_and_restored_row_for_row(tenant, tmp_path):
    partitions.partition_create(month=date(2021, 1, 1))
    partitions.partition_create(month=date(2021, 2, 1))
    task = make_task(tenant)
    originals = {e.id: e for e in _varied_runs(task, datetime(2021, 1, 1, tzinfo=UTC), 60)}
    store = ArchiveStore(str(tmp_path))

    report = executions_archive(before=datetime(2021, 2, 1, tzinfo=UTC), store=store)

    (archived,) = report.files
    assert archived.location.endswith(".parquet") and archived.rows == 60
    assert archived.manifest["format"] == "parquet"
    assert not TaskExecution.platform.filter(task=task).exists()
    parquet = pq.ParquetFile(archived.location)
    schema = parquet.schema_arrow
    assert parquet.metadata.num_rows == 60
    assert schema.field("scheduled_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("id").type == pa.string()
    assert schema.field("parameters").metadata == {b"json": b"true"}
    assert schema.field("attempt").type == pa.int64()
    assert schema.field("dead_lettered").type == pa.bool_()
    assert [m["location"] for m in store.manifests()] == [archived.location]

    assert executions_restore(location=archived.location) == 60
    restored = {
        r.execution_id: r for r in RestoredExecution.platform.filter(source=archived.location)
    }
    assert set(restored) == set(originals)
    for execution_id, original in originals.items():
        row = restored[execution_id].row
        for column in COMPARED:
            value = getattr(original, column if column != "tenant_id" else "tenant_id")
            if column in ("id", "tenant_id", "task_id", "root_execution_id"):
                value = getattr(original, column)
                value = str(value) if value is not None else None
            assert row[column] == value, (column, row[column], value)
        for column in TIMES:
            assert _same_time(row[column], getattr(original, column)), column
        assert restored[execution_id].scheduled_at == original.scheduled_at


def test_json_lines_archives_written_before_still_restore(tenant, tmp_path):
    task = make_task(tenant)
    runs = _varied_runs(task, datetime(2021, 5, 1, tzinfo=UTC), 7)
    store = ArchiveStore(str(tmp_path))
    rows = [
        {
            "id": str(e.id),
            "tenant_id": str(e.tenant_id),
            "task_id": str(e.task_id),
            "status": e.status,
            "scheduled_at": e.scheduled_at.isoformat(),
            "attempt": e.attempt,
            "parameters": e.parameters,
        }
        for e in runs
    ]
    old = store.write(
        name="executions-rows-old", rows=rows, expected=7, meta={"kind": "executions"}
    )
    assert old.location.endswith(".jsonl.gz")
    assert executions_restore(location=old.location) == 7
    restored = RestoredExecution.platform.filter(source=old.location)
    assert {r.execution_id for r in restored} == {e.id for e in runs}
    by_id = {r.execution_id: r for r in restored}
    for e in runs:
        assert by_id[e.id].row["parameters"] == e.parameters
        assert by_id[e.id].scheduled_at == e.scheduled_at
