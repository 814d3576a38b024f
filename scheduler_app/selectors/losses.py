"""Reads of a run's worker losses (`ExecutionLoss`), always for one tenant: another tenant's
run has none to show (its execution id is already a 404 in `execution_get`; this filters by
the tenant again)."""

from __future__ import annotations

from scheduler_app.models import ExecutionLoss, TaskExecution, Tenant


def execution_losses(*, tenant: Tenant, execution: TaskExecution) -> list[ExecutionLoss]:
    """The times this execution's worker was lost while it ran, oldest first: each one a
    requeue of the same attempt, the last one possibly its `worker_lost` failure."""
    return list(
        ExecutionLoss.objects.filter(tenant=tenant, execution_id=execution.id).order_by(
            "lost_at", "id"
        )
    )
