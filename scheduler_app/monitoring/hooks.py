"""A run's end counted in Redis once its transaction has committed. Nothing here can slow or
roll back the finish (`runs.settle` calls it, beside the run's notices)."""

from __future__ import annotations

from django.db import transaction

from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.counters import record_run_finished, record_run_finished_into


def run_end_record_on_commit(*, execution: TaskExecution, metrics_pipe=None) -> None:
    """`metrics_pipe`: a Redis pipeline the caller sends after the commit (a worker batches
    its end-of-run writes); without it the counts are sent on their own."""
    duration = None
    if execution.started_at and execution.completed_at:
        duration = (execution.completed_at - execution.started_at).total_seconds()
    tenant_id, tier, status = str(execution.tenant_id), execution.queue, execution.status

    def after_commit() -> None:
        if metrics_pipe is not None:
            record_run_finished_into(
                metrics_pipe,
                tenant_id=tenant_id,
                tier=tier,
                status=status,
                duration_seconds=duration,
            )
        else:
            record_run_finished(
                tenant_id=tenant_id, tier=tier, status=status, duration_seconds=duration
            )

    transaction.on_commit(after_commit)
