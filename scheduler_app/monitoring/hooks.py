"""What happens after a run ends, once its transaction has committed: count it in Redis and
hand its notifications to a Celery task. Nothing here can slow or roll back the finish."""

from __future__ import annotations

import logging

from django.db import transaction

from alerting.tasks import enqueue_run_notifications
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.counters import record_run_finished, record_run_finished_into

logger = logging.getLogger(__name__)


def run_finished_on_commit(
    *, execution: TaskExecution, dead_lettered: bool, metrics_pipe=None
) -> None:
    """`metrics_pipe`: a Redis pipeline the caller sends after the commit (a worker batches
    its end-of-run writes); without it the counts are sent on their own."""
    duration = None
    if execution.started_at and execution.completed_at:
        duration = (execution.completed_at - execution.started_at).total_seconds()
    tenant_id, tier, status = str(execution.tenant_id), execution.queue, execution.status
    wants_notice = bool(execution.task.notifications)
    execution_id = str(execution.id)

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
        if wants_notice:
            try:
                enqueue_run_notifications(execution_id=execution_id, dead_lettered=dead_lettered)
            except Exception as error:  # broker trouble must not break a finished run
                logger.warning("could not enqueue notifications for %s: %s", execution_id, error)

    transaction.on_commit(after_commit)
