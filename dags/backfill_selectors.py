"""Reads of backfills, tenant-scoped (another tenant's id is not found)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db.models import QuerySet

from dags.models import Backfill, BackfillRun, DagRun
from dags.selectors import _as_uuid
from scheduler_app.errors import NotFound
from scheduler_app.models import TaskExecution, Tenant

# What a released run's last state counts as.
_TASK_OUTCOMES = {
    "pending": "waiting",
    "queued": "waiting",
    "running": "running",
    "success": "succeeded",
    "failed": "failed",
    "timed_out": "failed",
    "cancelled": "cancelled",
    "skipped": "cancelled",
}
_DAG_OUTCOMES = {
    "queued": "waiting",
    "running": "running",
    "success": "succeeded",
    "failed": "failed",
    "partially_completed": "failed",
    "cancelled": "cancelled",
}
OUTCOMES = ("waiting", "running", "succeeded", "failed", "cancelled")


def backfill_list(*, tenant: Tenant, filters: Any = None) -> QuerySet[Backfill]:
    queryset = Backfill.objects.filter(tenant=tenant).select_related("task", "dag")
    filters = filters or {}
    if filters.get("task"):
        queryset = queryset.filter(task_id=_as_uuid(filters["task"], what="task"))
    if filters.get("dag"):
        queryset = queryset.filter(dag_id=_as_uuid(filters["dag"], what="DAG"))
    if filters.get("status"):
        queryset = queryset.filter(status=filters["status"])
    return queryset.order_by("-created_at")


def backfill_get(*, tenant: Tenant, backfill_id: Any) -> Backfill:
    found = backfill_list(tenant=tenant).filter(id=_as_uuid(backfill_id, what="backfill")).first()
    if found is None:
        raise NotFound("backfill not found")
    return found


def backfill_outcomes(*, backfill: Backfill) -> dict[str, int]:
    """How the runs it created stand: each fire's last attempt (a task) or its DAG run."""
    run_ids = BackfillRun.objects.filter(backfill=backfill, run_id__isnull=False).values("run_id")
    if backfill.task_id is not None:
        # DISTINCT ON (root) ... ORDER BY root, attempt DESC: each chain's last attempt.
        statuses = (
            TaskExecution.objects.filter(
                tenant_id=backfill.tenant_id,
                task_id=backfill.task_id,
                root_execution_id__in=run_ids,
            )
            .order_by("root_execution_id", "-attempt")
            .distinct("root_execution_id")
            .values_list("status", flat=True)
        )
        counted = Counter(_TASK_OUTCOMES.get(status, "failed") for status in statuses)
    else:
        statuses = DagRun.objects.filter(tenant_id=backfill.tenant_id, id__in=run_ids).values_list(
            "status", flat=True
        )
        counted = Counter(_DAG_OUTCOMES.get(status, "failed") for status in statuses)
    return {outcome: counted.get(outcome, 0) for outcome in OUTCOMES}
