"""The end of a chain that other nodes joined (singleton and debounced nodes,
`dags.engine.flow_starts`): each joined node ends with the chain's outcome, in its own run,
in the transaction that ended the chain (after the chain's own node was settled).

Why no joiner is missed: a singleton node joins an *active* run under its key's advisory
lock, held until its transaction commits; the end takes the same lock before it reads the
joins. Either the join committed first (the end sees its row), or the end holds the lock
first and commits the run ended, and the join's lookup, a later statement, sees it ended and
starts a run of its own. A debounced node joins only a `pending` run, by a conditional UPDATE
of its row: its join commits before the run can be queued, so before it can end.

The cost stays with those nodes: a chain whose node has neither singleton nor debounce is
told apart by its row and its (cached) version graph, without a query.
"""

from __future__ import annotations

from dags.engine.completion import node_complete
from dags.engine.state import NodeLink, run_lock
from dags.models import DagNodeJoin
from dags.versions import graph_of_version
from scheduler_app.flow_trigger_spec import SINGLETON
from scheduler_app.models import TaskExecution
from scheduler_app.services.flow_triggers import FlowKey, flow_key_lock


def _may_be_joined(execution: TaskExecution, link: NodeLink) -> bool:
    if execution.singleton_key or execution.debounce_key:
        return True
    # A debounced run's retries do not keep its key (they take no further start).
    node = graph_of_version(link.version_id).nodes.get(link.node_id) or {}
    return bool(node.get("debounce"))


def joined_nodes_settle(*, execution: TaskExecution, link: NodeLink) -> None:
    """The chain `link` names ended with `execution` (its last attempt, no retry scheduled by
    the worker). Unless the chain's own node just retried it, end every node that joined it."""
    if link.shard_index is not None or not _may_be_joined(execution, link):
        return
    root = link.execution_root_id
    if execution.singleton_key:
        flow_key_lock(execution.task_id, FlowKey(SINGLETON, execution.singleton_key))
    joins = list(DagNodeJoin.objects.filter(execution_root_id=root).order_by("run_id", "node_id"))
    if not joins:
        return
    retried = TaskExecution.platform.filter(
        root_execution_id=root, attempt__gt=execution.attempt
    ).exists()
    if retried:  # the chain's own node (a `retry` failure policy) goes on: so do they
        return
    for join in joins:
        run = run_lock(join.run_id)
        node_complete(
            run=run,
            node_id=join.node_id,
            status=execution.status,
            result=execution.result,
            error=execution.error_message,
            execution_id=root,
            may_retry=False,
        )
