"""The failure streaks of the tasks whose runs just ended, moved in the transaction that ended
them (`scheduler_app.services.failure_streaks`), and what a streak's change hands to alerting
once that commits: the runbook when `policy.pause_after_failures` is crossed, the recovery
notice when a success ends a streak and the task asks for `notifications.on_recovery`.

A batch of finishes is one statement for all its tasks, and a batch of plain successes of
tasks that were not failing is none at all (the count the claim loaded is 0: nothing to
reset). That reading may be a moment old: a failure of the same task committed after this
run was claimed is then not reset by it, and the next success resets it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from django.db import transaction

from alerting.tasks import enqueue_recovery_notice, enqueue_task_runbook
from scheduler_app.choices import RETRYABLE_STATUSES, ExecutionStatus, Trigger
from scheduler_app.models import TaskDefinition
from scheduler_app.services.executions import FinishReport
from scheduler_app.services.failure_streaks import (
    StreakChange,
    StreakTally,
    task_failure_streaks_count,
)

logger = logging.getLogger(__name__)


def failure_streaks_settle(reports: Sequence[FinishReport]) -> list[StreakChange]:
    """Call inside the transaction that ended the runs of `reports` (accepted ones)."""
    tallies: dict[uuid.UUID, StreakTally] = {}
    tasks: dict[uuid.UUID, TaskDefinition] = {}
    for report in reports:
        execution = report.execution
        if execution is None:
            continue
        task_id = execution.task_id
        if execution.status == ExecutionStatus.SUCCESS:
            tallies.setdefault(task_id, StreakTally(task_id)).succeeded(execution_id=execution.id)
        elif execution.status in RETRYABLE_STATUSES and report.next_attempt_id is None:
            tallies.setdefault(task_id, StreakTally(task_id)).failed(
                execution_id=execution.id, runbook_retry=execution.trigger == Trigger.RUNBOOK
            )
        else:
            continue
        tasks[task_id] = execution.task
    moving = [
        tally
        for tally in tallies.values()
        if tally.trailing_failures
        or tally.failures_before_success
        or tasks[tally.task_id].consecutive_failures
    ]
    changes = task_failure_streaks_count(moving)
    for change in changes:
        _hand_on(change, tasks[change.tally.task_id])
    return changes


def _hand_on(change: StreakChange, task: TaskDefinition) -> None:
    tally = change.tally
    if change.crossed and tally.last_failed_execution_id is not None:
        _after_commit(
            enqueue_task_runbook,
            task_id=str(task.id),
            execution_id=str(tally.last_failed_execution_id),
            failures=change.failures,
        )
    wants_recovery = bool((task.notifications or {}).get("on_recovery"))
    if change.recovered_after and wants_recovery and tally.recovered_execution_id is not None:
        _after_commit(
            enqueue_recovery_notice,
            execution_id=str(tally.recovered_execution_id),
            failures=change.recovered_after,
        )


def _after_commit(enqueue: Callable[..., None], **arguments: object) -> None:
    """Broker trouble is logged, never raised into a finished run."""

    def send() -> None:
        try:
            enqueue(**arguments)
        except Exception as error:
            logger.warning("could not enqueue %s %s: %s", enqueue.__name__, arguments, error)

    transaction.on_commit(send)
