"""Completion: a node's execution chain ended (success, or failed with no attempt left).

Two paths, one outcome. The common one (not a failure that fails the whole run) counts the
node in one statement that also takes the run's lock (`counting.node_end_and_count`), so the
lock is held only from there to the commit: `node_complete_locking`, for a caller that has
not locked the run. Otherwise (a node that may be retried, a `fail_all` failure) the caller
locks the run first and calls `node_complete`. Either way, the nodes the end made ready go
through readiness in the same transaction, and a run left with no node ends.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from dags.choices import FAILED_NODE_STATUSES, FailurePolicy, NodeStatus, RunStatus
from dags.graph import Graph
from dags.models import DagNodeState, DagRun
from dags.services.counting import Counted, node_end_and_count, node_set_final
from dags.services.hand_on import HandOn
from dags.services.node_retry import node_retries, node_retry
from dags.services.readiness import node_ended, nodes_ready, run_finish
from dags.versions import graph_of_version


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
) -> None:
    """A node's execution chain ended (success, or failed with no attempt left). The run
    row is locked by the caller. `hand_on`: see `dags.services.hand_on`."""
    if run.status != RunStatus.RUNNING:
        return
    graph = graph_of_version(run.version_id)
    if node_retry(run=run, graph=graph, node_id=node_id, status=status, execution_id=execution_id):
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
    the node takes the lock (see `dags.services.counting`), so it is held only from there to
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
