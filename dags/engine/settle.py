"""Settle: the engine's entry from a run's end (runs.settle) and from a worker building a node's
context.

The two places the rest of the system calls into the DAG engine for an execution:
when it settles (same transaction as its finish) and when a worker builds its context.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from dags.choices import ACTIVE_NODE_STATUSES, NodeStatus
from dags.engine.completion import node_complete, node_complete_locking
from dags.engine.dispatch import HandOn
from dags.engine.flow_joins import joined_nodes_settle
from dags.engine.mapping import chord_shard_settled, shard_settled
from dags.engine.state import (
    NodeLink,
    link_load,
    link_load_and_run_lock,
    link_remember,
    upstream_results_load,
)
from dags.models import DagNodeState
from dags.versions import graph_of_version
from handler_contract.python_signature import python_handler_reads_upstream
from scheduler_app.choices import Trigger

__all__ = [
    "HandOn",
    "NodeLink",
    "dag_execution_settled",
    "dag_upstream_results",
    "link_remember",
]

DAG_TRIGGERS = (Trigger.DAG, Trigger.RETRY)


def _link(execution) -> NodeLink | None:
    if execution.trigger not in DAG_TRIGGERS:
        return None
    return link_load(execution.root_execution_id or execution.id)


def dag_execution_settled(
    *, execution, next_attempt_id=None, hand_on: HandOn | None = None
) -> None:
    """Called in the transaction that ended an execution attempt (finish, lost worker).

    A retry scheduled means the node is still going; otherwise the node (or its shard)
    has its final outcome, and the engine moves the run on, in this same transaction.
    `hand_on`: what the finishing worker may be handed to run next (`dags.engine.dispatch`).
    """
    if execution.trigger not in DAG_TRIGGERS:
        return
    _own_node_settled(execution=execution, next_attempt_id=next_attempt_id, hand_on=hand_on)
    if next_attempt_id is None:
        link = link_load(execution.root_execution_id or execution.id)
        if link is not None:  # the nodes of other runs that joined this chain, if any
            joined_nodes_settle(execution=execution, link=link)


def _own_node_settled(*, execution, next_attempt_id, hand_on: HandOn | None) -> None:
    root = execution.root_execution_id or execution.id
    if next_attempt_id is None:
        link = link_load(root)
        if link is None:
            return
        if link.shard_index is not None and execution.trigger == Trigger.DAG:
            # A chord member's first attempt ended for good: the chord's join moves the run
            # on. No run lock (see chord_shard_settled).
            chord_shard_settled(link=link, execution=execution)
            return
        if link.shard_index is None and node_complete_locking(
            run_id=link.run_id,
            version_id=link.version_id,
            hand_on=hand_on,
            **_node_outcome(execution, link),
        ):
            return
    # The link (if not cached) and the run's lock in one round trip.
    found = link_load_and_run_lock(root)
    if found is None:
        return
    link, run = found
    if next_attempt_id is not None:
        DagNodeState.objects.filter(
            run=run,
            node_id=link.node_id,
            status__in=ACTIVE_NODE_STATUSES,
            execution_id=link.execution_root_id,
        ).update(
            status=NodeStatus.PENDING, attempts=execution.attempt + 1, updated_at=timezone.now()
        )
        return
    if link.shard_index is not None:
        shard_settled(run=run, link=link, execution=execution)
        return
    node_complete(run=run, hand_on=hand_on, **_node_outcome(execution, link))


def _node_outcome(execution, link: NodeLink) -> dict[str, Any]:
    """What a node's settled execution tells the engine. Its successors prefer the worker
    that ran it (sticky routing, or run right there)."""
    return {
        "node_id": link.node_id,
        "status": execution.status,
        "result": execution.result,
        "error": execution.error_message,
        "execution_id": link.execution_root_id,
        "worker_id": execution.worker_id or "",
    }


def dag_upstream_results(*, execution) -> dict[str, Any] | None:
    """{upstream node id: its result} for a DAG node's execution; None for other runs.

    Empty, without a query, when the node's handler could not see them anyway (a python
    function that declares neither `upstream_results` nor `context`)."""
    if execution.trigger not in DAG_TRIGGERS:
        return None
    if not _handler_reads_upstream(execution):
        return {}
    link = _link(execution)
    if link is None:
        return None
    depends_on = graph_of_version(link.version_id).nodes[link.node_id]["depends_on"]
    if not depends_on:
        return {}
    return upstream_results_load(run_id=link.run_id, node_ids=list(depends_on))


def _handler_reads_upstream(execution) -> bool:
    task_field = execution._meta.get_field("task")
    if not task_field.is_cached(execution):  # the claim loads it; do not query for it here
        return True
    return python_handler_reads_upstream(execution.task.handler_config or {})
