"""What depends on a run's end, settled in the transaction that ended it: the DAG node it ran
moves its run on, its counters and its notices go out once the transaction commits."""

from __future__ import annotations

import logging

from django.db import transaction

from alerting.tasks import enqueue_run_notifications
from dags.engine.settle import HandOn, dag_execution_settled
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.hooks import run_end_record_on_commit
from scheduler_app.services.executions import FinishReport

logger = logging.getLogger(__name__)


def run_settled(
    *, report: FinishReport, metrics_pipe=None, dag: bool = True, hand_on: HandOn | None = None
) -> None:
    """Call inside the transaction that ended the attempt (`report.accepted`). `dag`: False
    when the caller knows the run is no DAG node (a batch of plain successes). `hand_on`:
    what the finishing worker may be handed to run next (`dags.engine.dispatch`)."""
    execution = report.execution
    if execution is None:
        return
    run_end_record_on_commit(execution=execution, metrics_pipe=metrics_pipe)
    run_notices_on_commit(execution=execution, dead_lettered=report.dead_lettered)
    if dag:
        dag_execution_settled(
            execution=execution, next_attempt_id=report.next_attempt_id, hand_on=hand_on
        )


def run_notices_on_commit(*, execution: TaskExecution, dead_lettered: bool) -> None:
    """The run's notifications (its task's rules) handed to alerting's Celery task once the
    end commits; broker trouble is logged, never raised into a finished run."""
    if not execution.task.notifications:
        return
    execution_id = str(execution.id)

    def after_commit() -> None:
        try:
            enqueue_run_notifications(execution_id=execution_id, dead_lettered=dead_lettered)
        except Exception as error:
            logger.warning("could not enqueue notifications for %s: %s", execution_id, error)

    transaction.on_commit(after_commit)
