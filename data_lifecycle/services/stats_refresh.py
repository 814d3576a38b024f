"""Incremental maintenance of the hourly and daily statistics of tasks (`TaskStats`) and
DAGs (`DagStats`).

Only buckets that can still change are recomputed: hours from `now - lookback` on (a run
finishes after it was scheduled; late finishers older than the lookback are not counted
again), days overlapping that window. Everything older is final and never scanned again,
so the cost of a refresh depends on the recent rate, not on the size of the history. The
buckets also outlive the raw rows: archiving a month keeps its statistics.

One scan per bucket size: PostgreSQL counts the runs by status and by logarithmic bin of
duration and of lag (`latency_sketch.bin_sql`) in one GROUPING SETS pass, so what reaches
Python is a few histograms per bucket, not the runs. The tenant rollup of the tasks
(`task_id` None, what the overview reads) is the sum of the tasks' buckets.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from dags.models import DagRun
from data_lifecycle.latency_sketch import bin_sql, sketch_merge, sketch_quantiles
from data_lifecycle.models import DagStats, StatsBucket, TaskStats
from scheduler_app.models import TaskExecution


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Bucketed:
    """Counts and histograms of one owner (task or DAG) in one bucket."""

    tenant_id: uuid.UUID
    owner_id: uuid.UUID
    bucket_start: datetime
    by_status: dict[str, int]
    duration_sketch: dict[str, int]
    lag_sketch: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


def task_stats_refresh(
    *, now: datetime | None = None, lookback_hours: int | None = None, days: bool = True
) -> int:
    """Recompute the open hour (and, with `days`, day) buckets of tasks and DAGs.
    Returns the buckets written."""
    now = (now or timezone.now()).astimezone(UTC)
    lookback = lookback_hours or settings.LIFECYCLE["STATS_LOOKBACK_HOURS"]
    hour_start = floor_hour(now - timedelta(hours=lookback))
    windows = [(StatsBucket.HOUR, hour_start, floor_hour(now) + timedelta(hours=1))]
    if days:
        windows.append((StatsBucket.DAY, floor_day(hour_start), floor_day(now) + timedelta(days=1)))
    written = 0
    for bucket, start, end in windows:
        written += _write(TaskStats, bucket, start, end, _task_rows(bucket, start, end, now))
        written += _write(DagStats, bucket, start, end, _dag_rows(bucket, start, end, now))
    return written


def _write(
    model: type[models.Model], bucket: str, start: datetime, end: datetime, objects: list[Any]
) -> int:
    with transaction.atomic():
        # Every tenant's buckets of the window, rebuilt by the platform's refresh.
        model.platform.filter(bucket=bucket, bucket_start__gte=start, bucket_start__lt=end).delete()
        model.objects.bulk_create(objects, batch_size=1000)
    return len(objects)


def _task_rows(bucket: str, start: datetime, end: datetime, now: datetime) -> list[TaskStats]:
    found = _bucketed(TaskExecution._meta.db_table, "task_id", bucket, start, end)
    rollups: dict[tuple[uuid.UUID, datetime], list[Bucketed]] = {}
    for row in found:
        rollups.setdefault((row.tenant_id, row.bucket_start), []).append(row)
    rows = [_task_stats(row, row.owner_id, bucket, now) for row in found]
    for (tenant_id, bucket_start), members in rollups.items():
        merged = Bucketed(
            tenant_id=tenant_id,
            owner_id=tenant_id,
            bucket_start=bucket_start,
            by_status=sketch_merge(m.by_status for m in members),
            duration_sketch=sketch_merge(m.duration_sketch for m in members),
            lag_sketch=sketch_merge(m.lag_sketch for m in members),
        )
        rows.append(_task_stats(merged, None, bucket, now))
    return rows


def _task_stats(row: Bucketed, task_id: uuid.UUID | None, bucket: str, now: datetime) -> TaskStats:
    duration = sketch_quantiles(row.duration_sketch)
    lag = sketch_quantiles(row.lag_sketch)
    return TaskStats(
        tenant_id=row.tenant_id,
        task_id=task_id,
        bucket=bucket,
        bucket_start=row.bucket_start,
        total=row.total,
        by_status=row.by_status,
        duration_sketch=row.duration_sketch,
        lag_sketch=row.lag_sketch,
        **{f"duration_{name}": value for name, value in duration.items()},
        **{f"lag_{name}": value for name, value in lag.items()},
        refreshed_at=now,
    )


def _dag_rows(bucket: str, start: datetime, end: datetime, now: datetime) -> list[DagStats]:
    return [
        DagStats(
            tenant_id=row.tenant_id,
            dag_id=row.owner_id,
            bucket=bucket,
            bucket_start=row.bucket_start,
            total=row.total,
            by_status=row.by_status,
            duration_sketch=row.duration_sketch,
            lag_sketch=row.lag_sketch,
            refreshed_at=now,
        )
        for row in _bucketed(DagRun._meta.db_table, "dag_id", bucket, start, end)
    ]


def _bucketed(
    table: str, owner: str, bucket: str, start: datetime, end: datetime
) -> list[Bucketed]:
    """The runs of `table` scheduled in [start, end), per tenant, owner and bucket."""
    unit = "hour" if bucket == StatsBucket.HOUR else "day"
    duration = bin_sql("extract(epoch FROM completed_at - started_at)")
    lag = bin_sql("extract(epoch FROM started_at - scheduled_at)")
    # GROUPING(status, d, l): 3 = the status set, 5 = the duration bins, 6 = the lag bins.
    sql = f"""
        WITH base AS (
            SELECT tenant_id, {owner} AS owner_id,
                   date_trunc('{unit}', scheduled_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS b,
                   status,
                   CASE WHEN completed_at IS NOT NULL AND started_at IS NOT NULL
                        THEN {duration} END AS d,
                   CASE WHEN started_at IS NOT NULL THEN {lag} END AS l
            FROM {table}
            WHERE scheduled_at >= %s AND scheduled_at < %s
        ), counted AS (
            SELECT tenant_id, owner_id, b, status, d, l,
                   GROUPING(status, d, l) AS kind, count(*) AS n
            FROM base
            GROUP BY GROUPING SETS ((tenant_id, owner_id, b, status),
                                    (tenant_id, owner_id, b, d),
                                    (tenant_id, owner_id, b, l))
        )
        SELECT tenant_id, owner_id, b,
               jsonb_object_agg(status, n) FILTER (WHERE kind = 3),
               jsonb_object_agg(d, n) FILTER (WHERE kind = 5 AND d IS NOT NULL),
               jsonb_object_agg(l, n) FILTER (WHERE kind = 6 AND l IS NOT NULL)
        FROM counted
        GROUP BY tenant_id, owner_id, b
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [start, end])
        found = cursor.fetchall()
    return [
        Bucketed(
            tenant_id=tenant_id,
            owner_id=owner_id,
            bucket_start=bucket_start,
            by_status=_json(statuses),
            duration_sketch=_json(durations),
            lag_sketch=_json(lags),
        )
        for tenant_id, owner_id, bucket_start, statuses, durations, lags in found
    ]


def _json(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return {str(key): int(count) for key, count in value.items()}
