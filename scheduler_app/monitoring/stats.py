"""Tenant-scoped reads behind the dashboard: counts, rates, percentiles, trends."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from scheduler_app.choices import RETRYABLE_STATUSES, ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.selectors import visible_tasks

# Percentiles are computed over the most recent starts only, so the query stays bounded.
LAG_SAMPLE = 5000


def _percentile(sorted_values: list[float], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def runs_by_status(*, tenant: Tenant, since: datetime) -> dict[str, int]:
    rows = (
        TaskExecution.objects.filter(tenant=tenant, scheduled_at__gte=since)
        .values("status")
        .annotate(n=Count("id"))
    )
    return {row["status"]: row["n"] for row in rows}


def lag_percentiles(*, tenant: Tenant, since: datetime) -> dict[str, float | None]:
    lags = sorted(
        (started - scheduled).total_seconds()
        for scheduled, started in TaskExecution.objects.filter(
            tenant=tenant, scheduled_at__gte=since, started_at__isnull=False
        )
        .order_by("-scheduled_at")
        .values_list("scheduled_at", "started_at")[:LAG_SAMPLE]
    )
    return {name: _percentile(lags, q) for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def overview(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    hour = runs_by_status(tenant=tenant, since=now - timedelta(hours=1))
    day = runs_by_status(tenant=tenant, since=now - timedelta(days=1))
    finished = sum(day.get(s, 0) for s in (ExecutionStatus.SUCCESS, *RETRYABLE_STATUSES))
    failed = sum(day.get(s, 0) for s in RETRYABLE_STATUSES)
    return {
        "runs_last_hour": hour,
        "runs_last_day": day,
        "success_rate": None if not finished else (finished - failed) / finished,
        "failure_rate": None if not finished else failed / finished,
        "lag": lag_percentiles(tenant=tenant, since=now - timedelta(hours=1)),
        "dead_letters": TaskExecution.objects.filter(tenant=tenant, dead_lettered=True).count(),
        "tasks": visible_tasks(
            TaskDefinition.objects.filter(tenant=tenant, deleted_at__isnull=True)
        ).count(),
    }


def runs_over_time(*, tenant: Tenant, hours: int, now: datetime | None = None) -> list[dict]:
    """Buckets of succeeded/failed/other runs: per minute for an hour, per hour beyond."""
    now = now or timezone.now()
    per_minute = hours <= 1
    trunc = TruncMinute if per_minute else TruncHour
    rows = (
        TaskExecution.objects.filter(tenant=tenant, scheduled_at__gte=now - timedelta(hours=hours))
        .annotate(bucket=trunc("scheduled_at"))
        .values("bucket")
        .annotate(
            success=Count("id", filter=Q(status=ExecutionStatus.SUCCESS)),
            failed=Count("id", filter=Q(status__in=RETRYABLE_STATUSES)),
            total=Count("id"),
        )
        .order_by("bucket")
    )
    found = {row["bucket"]: row for row in rows}
    # Every bucket of the window, empty ones included, so the chart's x axis is time.
    step = timedelta(minutes=1) if per_minute else timedelta(hours=1)
    count = 60 if per_minute else hours
    last = now.replace(second=0, microsecond=0)
    if not per_minute:
        last = last.replace(minute=0)
    series = []
    for index in range(count - 1, -1, -1):
        bucket = last - index * step
        row = found.get(bucket, {"success": 0, "failed": 0, "total": 0})
        series.append(
            {
                "t": bucket.isoformat(),
                "success": row["success"],
                "failed": row["failed"],
                "other": row["total"] - row["success"] - row["failed"],
            }
        )
    return series


def task_trend(*, tenant: Tenant, task: TaskDefinition, limit: int = 60) -> list[dict]:
    """Duration and schedule lag of the task's most recent finished runs, oldest first. A run
    still going has no duration yet: plotting it (as a lag dot with no duration, or a duration
    to now) would draw a point that moves and then jumps; it joins the chart when it ends."""
    rows = (
        TaskExecution.objects.filter(
            tenant=tenant, task=task, started_at__isnull=False, completed_at__isnull=False
        )
        .order_by("-scheduled_at")
        .values("id", "scheduled_at", "started_at", "completed_at", "status")[:limit]
    )
    trend = []
    for row in reversed(list(rows)):
        duration = None
        if row["completed_at"] is not None:
            duration = (row["completed_at"] - row["started_at"]).total_seconds()
        trend.append(
            {
                "id": str(row["id"]),
                "t": row["scheduled_at"].isoformat(),
                "status": row["status"],
                "lag": (row["started_at"] - row["scheduled_at"]).total_seconds(),
                "duration": duration,
            }
        )
    return trend


def failure_breakdown(*, tenant: Tenant, task: TaskDefinition) -> list[dict]:
    rows = (
        TaskExecution.objects.filter(tenant=tenant, task=task, status__in=RETRYABLE_STATUSES)
        .values("error_class")
        .annotate(n=Count("id"))
        .order_by("-n")
    )
    return [
        {"error_class": row["error_class"] or "(unclassified)", "count": row["n"]} for row in rows
    ]


def execution_attempts(*, tenant: Tenant, execution: TaskExecution) -> list[TaskExecution]:
    """Every attempt of the same fire, first to last (retries point at the root)."""
    root = execution.root_execution_id or execution.id
    return list(
        TaskExecution.objects.filter(tenant=tenant, task_id=execution.task_id)
        .filter(Q(id=root) | Q(root_execution_id=root))
        .order_by("attempt", "created_at")
    )


def execution_timeline(execution: TaskExecution, *, losses: Sequence = ()) -> list[dict]:
    """The state changes this row recorded, in time order (the row keeps one timestamp per
    state; a fire rung ahead of its time is queued before it is scheduled), with the times
    its worker was lost (`ExecutionLoss` rows: the row's own timestamps keep only the last
    claim, so a requeue shows only there)."""
    steps = [("scheduled", execution.scheduled_at), ("queued", execution.queued_at)]
    steps += [("running", execution.started_at), (execution.status, execution.completed_at)]
    if execution.dead_lettered_at:
        steps.append(("dead-lettered", execution.dead_lettered_at))
    recorded = [{"state": s, "at": at} for s, at in steps if at is not None]
    recorded += [
        {"state": "worker_lost", "at": loss.lost_at, "note": _loss_note(loss)} for loss in losses
    ]
    return sorted(recorded, key=lambda step: step["at"])


def _loss_note(loss) -> str:
    then = "re-queued, the same attempt" if loss.outcome == "requeued" else "failed: worker_lost"
    return f"on {loss.worker_id or 'its worker'}: {then}"


def recent_executions(*, tenant: Tenant, limit: int = 20) -> list[TaskExecution]:
    return list(
        TaskExecution.platform.select_related("task")
        .filter(tenant=tenant)
        .order_by("-scheduled_at")[:limit]
    )


def late_start_count(*, since: datetime, grace_seconds: float) -> int:
    """System-wide: fires (attempt 1, by the schedule) that started late or have not started."""
    now = timezone.now()
    late = Q(started_at__gt=F("scheduled_at") + timedelta(seconds=grace_seconds))
    never = Q(started_at__isnull=True, scheduled_at__lt=now - timedelta(seconds=grace_seconds))
    return (
        TaskExecution.platform.filter(scheduled_at__gte=since, trigger="schedule", attempt=1)
        .filter(late | never)
        .exclude(status__in=[ExecutionStatus.CANCELLED, ExecutionStatus.SKIPPED])
        .count()
    )
