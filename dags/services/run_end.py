"""The end of a DAG run: its final status once no node is left, or an abort (fail_all, a
cancel) that ends it at once and stops what is still going.

Runs inside the transaction that ends the run, with the run row locked. Ending a run frees
one of its DAG's `max_active_runs` slots; the caller fills it
(`dags.services.readiness.queued_runs_start`) when these return True. They cannot do it
themselves: starting a queued run makes its roots ready, and a node that ends can end a
run, so the run's end sits below readiness, not beside it.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from dags.choices import ACTIVE_NODE_STATUSES, FAILED_NODE_STATUSES, NodeStatus, RunStatus
from dags.models import DagNodeExecution, DagNodeState, DagRun
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus
from scheduler_app.models import TaskExecution
from scheduler_app.services.run_signals import cancel_request

logger = logging.getLogger(__name__)


def run_finalize(*, run: DagRun) -> bool:
    """No node left: the run ends success, failed or partially_completed. True when it
    ended here (its DAG's slot is free)."""
    statuses = set(DagNodeState.objects.filter(run=run).values_list("status", flat=True))
    if statuses & set(FAILED_NODE_STATUSES):
        final = (
            RunStatus.PARTIALLY_COMPLETED if NodeStatus.SUCCESS in statuses else RunStatus.FAILED
        )
    else:
        final = RunStatus.SUCCESS
    return _run_end(run=run, status=final)


def _run_end(*, run: DagRun, status: str) -> bool:
    now = timezone.now()
    ended = (
        DagRun.objects.filter(id=run.id, status=RunStatus.RUNNING).update(
            status=status, completed_at=now
        )
        == 1
    )
    if ended:
        run.status = status
        run.completed_at = now
    return ended


def run_abort(*, run: DagRun, status: str, reason: str) -> bool:
    """fail_all or a cancel: end the run now, cancel every node that has not ended and
    every execution of it that has not started, and tell the workers running the others to
    kill them (after commit; their node is already cancelled, so a late result is ignored).
    True when it ended here (its DAG's slot is free)."""
    was_queued = run.status == RunStatus.QUEUED
    if was_queued:
        DagRun.objects.filter(id=run.id, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING)
        run.status = RunStatus.RUNNING
    if not _run_end(run=run, status=status):
        return False
    now = timezone.now()
    DagNodeState.objects.filter(run=run, status__in=ACTIVE_NODE_STATUSES).update(
        status=NodeStatus.CANCELLED, error_message=reason, completed_at=now, updated_at=now
    )
    DagRun.objects.filter(id=run.id).update(remaining_nodes=0)
    roots = DagNodeExecution.objects.filter(run=run).values_list("execution_root_id", flat=True)
    roots = list(roots)
    TaskExecution.objects.filter(root_execution_id__in=roots, status__in=WAITING_STATUSES).update(
        status=ExecutionStatus.CANCELLED,
        completed_at=now,
        error_message=f"DAG run ended: {reason}",
        updated_at=now,
    )
    running = [
        str(execution_id)
        for execution_id in TaskExecution.objects.filter(
            root_execution_id__in=roots, status=ExecutionStatus.RUNNING
        ).values_list("id", flat=True)
    ]
    if running:
        transaction.on_commit(lambda: _running_executions_stop(running))
    return True


def _running_executions_stop(execution_ids: list[str]) -> None:
    """The same signal as `POST /executions/{id}/cancel`: the worker kills the run."""
    for execution_id in execution_ids:
        try:
            cancel_request(execution_id=execution_id)
        except Exception:  # Redis away: the run finishes on its own and is ignored
            logger.exception("could not ask the worker to stop execution %s", execution_id)
