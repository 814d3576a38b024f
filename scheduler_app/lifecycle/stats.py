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

from django.db import connection
from django.db.models import Count, Max, Sum

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
    """One tenant's runs between `since` and `until` (hour buckets), summed in the database."""
    rows = TaskStats.objects.filter(
        tenant_id=tenant.id,
        bucket=StatsBucket.HOUR,
        bucket_start__gte=since,
        bucket_start__lt=until,
    )
    totals = rows.aggregate(
        total=Sum("total"),
        tasks=Count("task_id", distinct=True),
        worst_lag_p95=Max("lag_p95"),
        worst_duration_p95=Max("duration_p95"),
    )
    return {
        "total": totals["total"] or 0,
        "by_status": _status_totals(rows),
        "tasks": totals["tasks"],
        "worst_lag_p95": totals["worst_lag_p95"],
        "worst_duration_p95": totals["worst_duration_p95"],
    }


def _status_totals(rows) -> dict[str, int]:
    if connection.vendor == "postgresql":
        query, params = rows.values("id").query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT key, sum(value::bigint) FROM scheduler_app_taskstats s, "
                "jsonb_each_text(s.by_status) WHERE s.id IN (" + query + ") GROUP BY key",
                params,
            )
            return {key: int(count) for key, count in cursor.fetchall()}
    by_status: Counter[str] = Counter()
    for counts in rows.values_list("by_status", flat=True):
        by_status.update(counts)
    return dict(by_status)
