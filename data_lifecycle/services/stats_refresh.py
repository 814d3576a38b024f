"""Incremental maintenance of per-task hourly and daily statistics (`TaskStats`).

Only buckets that can still change are recomputed: hours from `now - lookback` on (a run
finishes after it was scheduled; late finishers older than the lookback are not counted
again), days overlapping that window. Everything older is final and never scanned again,
so the cost of a refresh depends on the recent rate, not on the size of the history. The
buckets also outlive the raw rows: archiving a month keeps its statistics.

PostgreSQL computes the percentiles in SQL (percentile_cont).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from data_lifecycle.models import StatsBucket, TaskStats
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution

STATUSES = [choice.value for choice in ExecutionStatus]
QUANTILES = (0.5, 0.95, 0.99)


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def task_stats_refresh(
    *, now: datetime | None = None, lookback_hours: int | None = None, days: bool = True
) -> int:
    """Recompute the open hour (and, with `days`, day) buckets. Returns buckets written."""
    now = (now or timezone.now()).astimezone(UTC)
    lookback = lookback_hours or settings.LIFECYCLE["STATS_LOOKBACK_HOURS"]
    hour_start = floor_hour(now - timedelta(hours=lookback))
    end = floor_hour(now) + timedelta(hours=1)
    written = _refresh(StatsBucket.HOUR, hour_start, end, now)
    if days:
        written += _refresh(
            StatsBucket.DAY, floor_day(hour_start), floor_day(now) + timedelta(days=1), now
        )
    return written


def _refresh(bucket: str, start: datetime, end: datetime, now: datetime) -> int:
    rows = _aggregate_sql(bucket, start, end)
    objects = [TaskStats(bucket=bucket, refreshed_at=now, **row) for row in rows]
    with transaction.atomic():
        TaskStats.objects.filter(
            bucket=bucket, bucket_start__gte=start, bucket_start__lt=end
        ).delete()
        TaskStats.objects.bulk_create(objects, batch_size=1000)
    return len(objects)


def _aggregate_sql(bucket: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    table = TaskExecution._meta.db_table
    unit = "hour" if bucket == StatsBucket.HOUR else "day"
    status_counts = ", ".join(f"count(*) FILTER (WHERE status = '{status}')" for status in STATUSES)
    duration = "extract(epoch FROM completed_at - started_at)"
    lag = "extract(epoch FROM started_at - scheduled_at)"
    sql = f"""
        SELECT tenant_id, task_id,
               date_trunc('{unit}', scheduled_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
               count(*), {status_counts},
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY {duration})
                   FILTER (WHERE completed_at IS NOT NULL AND started_at IS NOT NULL),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY {lag})
                   FILTER (WHERE started_at IS NOT NULL)
        FROM {table}
        WHERE scheduled_at >= %s AND scheduled_at < %s
        -- per task, and per tenant (task_id NULL: the tenant's rollup the overview reads)
        GROUP BY GROUPING SETS ((1, 2, 3), (1, 3))
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [start, end])
        found = cursor.fetchall()
    rows = []
    for tenant_id, task_id, bucket_start, total, *rest in found:
        counts, durations, lags = rest[: len(STATUSES)], rest[-2], rest[-1]
        rows.append(
            {
                "tenant_id": tenant_id,
                "task_id": task_id,
                "bucket_start": bucket_start,
                "total": total,
                "by_status": {s: c for s, c in zip(STATUSES, counts, strict=True) if c},
                **_quantile_fields("duration", durations),
                **_quantile_fields("lag", lags),
            }
        )
    return rows


def _quantile_fields(prefix: str, values: list[float] | None) -> dict[str, float | None]:
    values = values or [None, None, None]
    return {
        f"{prefix}_p{int(q * 100)}": (float(v) if v is not None else None)
        for q, v in zip(QUANTILES, values, strict=True)
    }
