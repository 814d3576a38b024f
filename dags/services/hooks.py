"""The two places the rest of the system calls into the DAG engine for an execution:
when it settles (same transaction as its finish) and when a worker builds its context."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from dags.choices import ACTIVE_NODE_STATUSES, NodeStatus
from dags.graph import graph_of_version
from dags.models import DagNodeExecution, DagNodeState
from dags.services.engine import lock_run, node_complete
from scheduler_app.choices import Trigger

DAG_TRIGGERS = (Trigger.DAG, Trigger.RETRY)


@dataclass(frozen=True)
class NodeLink:
    run_id: uuid.UUID
    version_id: uuid.UUID
    node_id: str
    shard_index: int | None
    execution_root_id: uuid.UUID


# Links never change once written: the worker that read one to build the handler's
# context reuses it when the same execution finishes (one query saved on the hot path).
_links: dict[uuid.UUID, NodeLink] = {}
_MAX_CACHED_LINKS = 4096


def _link(execution) -> NodeLink | None:
    if execution.trigger not in DAG_TRIGGERS:
        return None
    root = execution.root_execution_id or execution.id
    cached = _links.get(root)
    if cached is not None:
        return cached
    row = (
        DagNodeExecution.objects.filter(execution_root_id=root)
        .values_list("run_id", "run__version_id", "node_id", "shard_index")
        .first()
    )
    if row is None:
        return None
    if len(_links) >= _MAX_CACHED_LINKS:
        _links.clear()
    link = _links[root] = NodeLink(*row, execution_root_id=root)
    return link


def dag_execution_settled(*, execution, next_attempt_id=None) -> None:
    """Called in the transaction that ended an execution attempt (finish, lost worker).

    A retry scheduled means the node is still going; otherwise the node (or its shard)
    has its final outcome, and the engine moves the run on, in this same transaction.
    """
    link = _link(execution)
    if link is None:
        return
    run = lock_run(link.run_id)
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
    status, result = execution.status, execution.result
    if link.shard_index is not None:
        from dags.services.mapping import shard_settled

        shard_settled(run=run, link=link, execution=execution)
        return
    node_complete(
        run=run,
        node_id=link.node_id,
        status=status,
        result=result,
        error=execution.error_message,
        execution_id=link.execution_root_id,
    )


def dag_upstream_results(*, execution) -> dict[str, Any] | None:
    """{upstream node id: its result} for a DAG node's execution; None for other runs."""
    link = _link(execution)
    if link is None:
        return None
    depends_on = graph_of_version(link.version_id).nodes[link.node_id]["depends_on"]
    if not depends_on:
        return {}
    return dict(
        DagNodeState.objects.filter(run_id=link.run_id, node_id__in=depends_on).values_list(
            "node_id", "result"
        )
    )
