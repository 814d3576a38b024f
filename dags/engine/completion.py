"""Completion: a node's execution chain ended; count it, or retry it.

The `retry` failure policy: a failed node is tried again before its failure counts.

A node retries when the DAG's `failure_policy` is `retry` or the node's own is. Its policy is
the node's `retry_policy`, else the DAG's, over the task's own (max_attempts, backoff,
base_delay_seconds, max_delay_seconds). Its executions are dispatched with the policy's
`max_attempts`, so a failure the worker retries by itself (a transient error) is spaced by the
task's backoff as usual; a failure the worker would not retry (a permanent error, a timeout
with no attempt left under the task's own rules) is retried here, in the transaction that
ended it, as the next attempt of the same chain: a `pending` row at now + the policy's delay
(no broker delay; the beat publishes it when due, invariant 4). Only when the attempts are
spent does the node fail and the DAG's policy apply (`retry` itself then goes on as
`skip_downstream`).

Completion: a node's execution chain ended (success, or failed with no attempt left).

Two paths, one outcome. The common one (not a failure that fails the whole run) counts the
node in one statement that also takes the run's lock (`state.node_end_and_count`), so the
lock is held only from there to the commit: `node_complete_locking`, for a caller that has
not locked the run. Otherwise (a node that may be retried, a `fail_all` failure) the caller
locks the run first and calls `node_complete`. Either way, the nodes the end made ready go
through readiness in the same transaction, and a run left with no node ends.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from dags.choices import (
    ACTIVE_NODE_STATUSES,
    FAILED_NODE_STATUSES,
    FailurePolicy,
    NodeStatus,
    RunStatus,
)
from dags.engine.dispatch import HandOn, node_retries, policy_overrides
from dags.engine.readiness import node_ended, nodes_ready, run_finish
from dags.engine.state import Counted, node_end_and_count, node_set_final
from dags.graph import Graph
from dags.models import DagNodeState, DagRun
from dags.versions import graph_of_version
from scheduler_app.choices import RETRYABLE_STATUSES, ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds
from scheduler_app.services.follow_ups import execution_follow_up_create


def _retry_policy(graph: Graph, node_id: str, task: TaskDefinition) -> RetryPolicy:
    overrides = policy_overrides(graph, node_id)
    return RetryPolicy(
        max_attempts=int(overrides.get("max_attempts", task.max_attempts)),
        backoff=overrides.get("backoff", task.backoff),
        base_delay_seconds=float(overrides.get("base_delay_seconds", task.base_delay_seconds)),
        max_delay_seconds=float(overrides.get("max_delay_seconds", task.max_delay_seconds)),
    )


def node_retry(
    *, run: DagRun, graph: Graph, node_id: str, status: str, execution_id: uuid.UUID | None
) -> bool:
    """Schedule the next attempt of a node whose chain just ended `status`, if the policy
    allows it; True when it did (the node is `pending` again and nothing was counted).
    The run row is locked by the caller."""
    if execution_id is None or status not in RETRYABLE_STATUSES or not node_retries(graph, node_id):
        return False
    last = (
        TaskExecution.platform.filter(root_execution_id=execution_id).order_by("-attempt").first()
    )
    if last is None or last.status not in RETRYABLE_STATUSES or last.attempt >= last.max_attempts:
        return False
    now = timezone.now()
    policy = _retry_policy(graph, node_id, TaskDefinition.platform.get(id=last.task_id))
    delay = retry_delay_seconds(policy, failed_attempt=last.attempt)
    # The worker dead-lettered this attempt (it would not retry it); the DAG's policy does.
    TaskExecution.platform.filter(id=last.id, scheduled_at=last.scheduled_at).update(
        dead_lettered=False, dead_lettered_at=None
    )
    execution_follow_up_create(
        previous=last,
        status=ExecutionStatus.PENDING,
        scheduled_at=now + timedelta(seconds=delay),
        attempt=last.attempt + 1,
        max_attempts=last.max_attempts,
    )
    DagNodeState.objects.filter(
        run=run, node_id=node_id, status__in=ACTIVE_NODE_STATUSES, execution_id=execution_id
    ).update(status=NodeStatus.PENDING, attempts=last.attempt + 1, updated_at=now)
    return True


def node_complete(
    *,
    run: DagRun,
    node_id: str,
    status: str,
    result: Any,
    error: str = "",
    execution_id: uuid.UUID | None = None,
    worker_id: str = "",
    hand_on: HandOn | None = None,
    may_retry: bool = True,
) -> None:
    """A node's execution chain ended (success, or failed with no attempt left). The run
    row is locked by the caller. `hand_on`: see `dags.engine.dispatch`. `may_retry`: False
    for a node that joined another node's chain (`dags.engine.flow_joins`): it takes the
    chain's outcome, and the chain's retries are its own node's."""
    if run.status != RunStatus.RUNNING:
        return
    graph = graph_of_version(run.version_id)
    if may_retry and node_retry(
        run=run, graph=graph, node_id=node_id, status=status, execution_id=execution_id
    ):
        return
    if _counts_in_one_statement(graph, status):
        counted = _end_and_count(
            run_id=run.id,
            graph=graph,
            node_id=node_id,
            status=status,
            result=result,
            error=error,
            execution_id=execution_id,
        )
        if counted is None:
            return
        run.remaining_nodes = counted.remaining_nodes
        _counted_move_on(run=run, ready=counted.ready, worker_id=worker_id, hand_on=hand_on)
        return
    if not node_set_final(
        run=run,
        node_id=node_id,
        status=status,
        result=result,
        error=error,
        execution_id=execution_id,
    ):
        return
    ready = node_ended(run=run, graph=graph, node_id=node_id, status=status)
    if ready and run.status == RunStatus.RUNNING:
        nodes_ready(
            run=run, node_ids=list(ready), known=ready, prefer_worker=worker_id, hand_on=hand_on
        )


def node_complete_locking(
    *,
    run_id: uuid.UUID,
    version_id: uuid.UUID,
    node_id: str,
    status: str,
    result: Any,
    error: str = "",
    execution_id: uuid.UUID | None = None,
    worker_id: str = "",
    hand_on: HandOn | None = None,
) -> bool:
    """`node_complete` for a caller that has not locked the run: the statement that counts
    the node takes the lock (see `dags.engine.state`), so it is held only from there to
    the commit. False (nothing done) where that does not apply; the caller then locks the run
    and calls `node_complete`."""
    graph = graph_of_version(version_id)
    if not _counts_in_one_statement(graph, status):
        return False
    if status in FAILED_NODE_STATUSES and node_retries(graph, node_id):
        return False  # it may be retried: decided under the run's lock (node_complete)
    counted = _end_and_count(
        run_id=run_id,
        graph=graph,
        node_id=node_id,
        status=status,
        result=result,
        error=error,
        execution_id=execution_id,
    )
    if counted is not None and (counted.remaining_nodes == 0 or counted.ready):
        # The common case (a sibling of a wide fan-in) ends here, right before the commit
        # that releases the run's lock.
        _counted_move_on(run=counted.run, ready=counted.ready, worker_id=worker_id, hand_on=hand_on)
    return True


def _counts_in_one_statement(graph: Graph, status: str) -> bool:
    """The common case (not a failure that fails the whole run)."""
    failed = status in FAILED_NODE_STATUSES
    return not (failed and graph.failure_policy == FailurePolicy.FAIL_ALL)


def _end_and_count(
    *,
    run_id: uuid.UUID,
    graph: Graph,
    node_id: str,
    status: str,
    result: Any,
    error: str,
    execution_id: uuid.UUID | None,
) -> Counted | None:
    return node_end_and_count(
        run_id=run_id,
        node_id=node_id,
        status=status,
        result=result,
        error=error,
        execution_id=execution_id,
        children=graph.downstream[node_id],
        succeeded=int(status == NodeStatus.SUCCESS),
        failed=int(status in FAILED_NODE_STATUSES),
        skipped=int(status == NodeStatus.SKIPPED),
        now=timezone.now(),
    )


def _counted_move_on(
    *, run: DagRun, ready: dict[str, DagNodeState], worker_id: str, hand_on: HandOn | None
) -> None:
    if run.remaining_nodes == 0:
        run_finish(run=run)
    if ready and run.status == RunStatus.RUNNING:
        nodes_ready(
            run=run, node_ids=list(ready), known=ready, prefer_worker=worker_id, hand_on=hand_on
        )
