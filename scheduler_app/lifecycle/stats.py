"""Reads of the per-task statistics (what `GET /api/v1/admin/metrics` and dashboards use).

    task_stats(tenant=t, since=..., until=..., bucket="hour"|"day", task_id=None)
        -> [{"task_id", "bucket_start", "total", "by_status": {"success": n, ...},
             "duration_p50", "duration_p95", "duration_p99", "lag_p50", "lag_p95", "lag_p99"}]
           ordered by bucket_start then task_id; seconds; percentiles None when no run finished.
    stats_overview(tenant=t, since=..., until=...)
        -> {"total": n, "by_status": {...}, "tasks": k, "worst_lag_p95": s, "worst_duration_p95": s}

Both read only the `TaskStats` buckets (never the executions table), so they answer in
milliseconds at any history size. Buckets are at most STATS_REFRESH_SECONDS old.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

from scheduler_app.models import StatsBucket, TaskStats, Tenant

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
    if bucket not in StatsBucket.values:
        raise ValueError(f"bucket must be one of {', '.join(StatsBucket.values)}")
    rows = TaskStats.objects.filter(
        tenant_id=tenant.id, bucket=bucket, bucket_start__gte=since, bucket_start__lt=until
    )
    if task_id is not None:
        rows = rows.filter(task_id=task_id)
    return list(rows.order_by("bucket_start", "task_id").values(*FIELDS))


def stats_overview(*, tenant: Tenant, since: datetime, until: datetime) -> dict[str, Any]:
    rows = task_stats(tenant=tenant, since=since, until=until, bucket=StatsBucket.HOUR)
    by_status: Counter[str] = Counter()
    for row in rows:
        by_status.update(row["by_status"])
    lags = [r["lag_p95"] for r in rows if r["lag_p95"] is not None]
    durations = [r["duration_p95"] for r in rows if r["duration_p95"] is not None]
    return {
        "total": sum(r["total"] for r in rows),
        "by_status": dict(by_status),
        "tasks": len({r["task_id"] for r in rows}),
        "worst_lag_p95": max(lags, default=None),
        "worst_duration_p95": max(durations, default=None),
    }
