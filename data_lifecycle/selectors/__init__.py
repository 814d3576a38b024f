"""Reads of the per-task statistics (what `GET /api/v1/admin/metrics` and dashboards use).

    task_stats(tenant=t, since=..., until=..., bucket="hour"|"day", task_id=None)
        -> [{"task_id", "bucket_start", "total", "by_status": {"success": n, ...},
             "duration_p50", "duration_p95", "duration_p99", "lag_p50", "lag_p95", "lag_p99"}]
           ordered by bucket_start then task_id; seconds; percentiles None when no run finished.
    stats_overview(tenant=t, since=..., until=..., bucket="hour"|"day")
        -> {"total": n, "by_status": {...}, "worst_lag_p95": s, "worst_duration_p95": s,
            "series": [the tenant's rollup buckets, same keys as above, task_id None]}

Both read only the `TaskStats` buckets (never the executions table), so they answer in
milliseconds at any history size. Buckets are at most STATS_REFRESH_SECONDS old.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

from data_lifecycle.models import StatsBucket, TaskStats
from scheduler_app.models import Tenant

FIELDS = (
    "task_id",
    "bucket_start",
    "total",
    "by_status",
    "duration_p50",
    "duration_p95",
    "duration_p99",
    "lag_p50",
    "lag_p95",
    "lag_p99",
)


def task_stats(
    *,
    tenant: Tenant,
    since: datetime,
    until: datetime,
    bucket: str = StatsBucket.HOUR,
    task_id: uuid.UUID | str | None = None,
) -> list[dict[str, Any]]:
    """Per-task buckets (all the tenant's tasks, or one), oldest first."""
    if bucket not in StatsBucket.values:
        raise ValueError(f"bucket must be one of {', '.join(StatsBucket.values)}")
    rows = TaskStats.objects.filter(
        tenant_id=tenant.id, bucket=bucket, bucket_start__gte=since, bucket_start__lt=until
    )
    rows = rows.filter(task_id=task_id) if task_id is not None else rows.exclude(task_id=None)
    return list(rows.order_by("bucket_start", "task_id").values(*FIELDS))


def stats_overview(
    *, tenant: Tenant, since: datetime, until: datetime, bucket: str = StatsBucket.HOUR
) -> dict[str, Any]:
    """The tenant's runs between `since` and `until`, from its rollup buckets (one row per
    hour or day, whatever the number of tasks): totals by status, the worst bucket's p95s,
    and the series itself."""
    series = list(
        TaskStats.objects.filter(
            tenant_id=tenant.id,
            bucket=bucket,
            task_id=None,
            bucket_start__gte=since,
            bucket_start__lt=until,
        )
        .order_by("bucket_start")
        .values(*FIELDS)
    )
    by_status: Counter[str] = Counter()
    for row in series:
        by_status.update(row["by_status"])
    lags = [r["lag_p95"] for r in series if r["lag_p95"] is not None]
    durations = [r["duration_p95"] for r in series if r["duration_p95"] is not None]
    return {
        "total": sum(r["total"] for r in series),
        "by_status": dict(by_status),
        "worst_lag_p95": max(lags, default=None),
        "worst_duration_p95": max(durations, default=None),
        "series": series,
    }
