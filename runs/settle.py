"""What depends on a run's end, settled in the transaction that ended it: the DAG node it ran
moves its run on, its task's failure streak moves (`runs.failure_streaks`), its counters and
its notices go out once the transaction commits."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction

from alerting.tasks import enqueue_run_notifications
from dags.engine.settle import HandOn, dag_execution_settled
from runs.failure_streaks import failure_streaks_settle
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.hooks import run_end_record_on_commit
from scheduler_app.services.executions import FinishReport

logger = logging.getLogger(__name__)


def runs_settled(reports: Sequence[FinishReport], *, metrics_pipe=None) -> None:
    """A batch's accepted finishes, each settled, and their tasks' failure streaks moved in
    one statement for the batch (not one per run)."""
    accepted = [report for report in reports if report.accepted]
    for report in accepted:
        run_settled(report=report, metrics_pipe=metrics_pipe, streak=False)
    failure_streaks_settle(accepted)


def run_settled(
    *,
    report: FinishReport,
    metrics_pipe=None,
    dag: bool = True,
    hand_on: HandOn | None = None,
    streak: bool = True,
) -> None:
    """Call inside the transaction that ended the attempt (`report.accepted`). `dag`: False
    when the caller knows the run is no DAG node (a batch of plain successes). `hand_on`:
    what the finishing worker may be handed to run next (`dags.engine.dispatch`). `streak`:
    False when the caller moves the batch's failure streaks itself (`runs_settled`)."""
    execution = report.execution
    if execution is None:
        return
    if streak:
        failure_streaks_settle([report])
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
