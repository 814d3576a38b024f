"""Reads of a run's node attempts: every attempt of each node, earlier ones (DagNodeAttempt,
kept by a re-run) and the current one (DagNodeState), with the live state of the execution
chain that ran each. The run is already the caller's tenant's (found by `dag_run_get`)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dags.models import DagNodeAttempt, DagNodeAttemptExecution, DagNodeState, DagRun
from scheduler_app.models import TaskExecution


@dataclass(frozen=True)
class NodeAttempt:
    node_id: str
    number: int
    trigger: str
    triggered_by: str
    status: str
    current: bool
    execution_id: uuid.UUID | None
    execution_attempts: int
    started_at: datetime | None
    completed_at: datetime | None
    error_message: str
    map_total: int | None
    # The chain's latest execution (its live status, the try that ran last), if any.
    execution: TaskExecution | None = None
    # An earlier fan-out attempt's shards: (shard index, root execution id), in order.
    shard_executions: list[tuple[int, uuid.UUID]] = field(default_factory=list)


def _latest_executions(
    *, run: DagRun, roots: Iterable[uuid.UUID]
) -> dict[uuid.UUID, TaskExecution]:
    roots = list(set(roots))
    if not roots:
        return {}
    latest: dict[uuid.UUID, TaskExecution] = {}
    for execution in TaskExecution.objects.filter(
        tenant_id=run.tenant_id, root_execution_id__in=roots
    ).order_by("root_execution_id", "attempt"):
        latest[execution.root_execution_id] = execution
    return latest


def dag_run_node_attempts(
    *, run: DagRun, nodes: Iterable[DagNodeState], rerun_only: bool = False
) -> dict[str, list[NodeAttempt]]:
    """node id -> its attempts, oldest first, the current one last. `rerun_only`: only the
    nodes that have more than one (what the run page lists as history)."""
    earlier: dict[str, list[DagNodeAttempt]] = defaultdict(list)
    for attempt in DagNodeAttempt.objects.filter(run=run).order_by("node_id", "number"):
        earlier[attempt.node_id].append(attempt)
    shards: dict[int, list[tuple[int, uuid.UUID]]] = defaultdict(list)
    for row in DagNodeAttemptExecution.objects.filter(run=run, shard_index__isnull=False).order_by(
        "attempt_id", "shard_index"
    ):
        shards[row.attempt_id].append((row.shard_index, row.execution_root_id))
    nodes = [node for node in nodes if not rerun_only or node.node_id in earlier]
    latest = _latest_executions(
        run=run,
        roots=[a.execution_id for kept in earlier.values() for a in kept if a.execution_id]
        + [node.execution_id for node in nodes if node.execution_id],
    )
    history: dict[str, list[NodeAttempt]] = {}
    for node in nodes:
        rows = [
            _node_attempt(attempt, latest=latest, shard_executions=shards.get(attempt.id, []))
            for attempt in earlier.get(node.node_id, [])
        ]
        rows.append(_node_attempt(node, latest=latest))
        history[node.node_id] = rows
    return history


def _node_attempt(
    row: DagNodeAttempt | DagNodeState,
    *,
    latest: dict[uuid.UUID, TaskExecution],
    shard_executions: list[tuple[int, uuid.UUID]] | None = None,
) -> NodeAttempt:
    """One attempt of a node, from the row that holds it: an earlier one (a DagNodeAttempt a
    re-run kept) or the current one (the node's DagNodeState, whose attempt fields carry an
    `attempt_` prefix and whose chain's attempts are `attempts`)."""
    current = isinstance(row, DagNodeState)
    return NodeAttempt(
        node_id=row.node_id,
        number=row.attempt_number if current else row.number,
        trigger=row.attempt_trigger if current else row.trigger,
        triggered_by=row.attempt_triggered_by if current else row.triggered_by,
        status=row.status,
        current=current,
        execution_id=row.execution_id,
        execution_attempts=row.attempts if current else row.execution_attempts,
        started_at=row.started_at,
        completed_at=row.completed_at,
        error_message=row.error_message,
        map_total=row.map_total,
        execution=latest.get(row.execution_id) if row.execution_id else None,
        shard_executions=shard_executions or [],
    )


def earlier_attempt_links(
    *, tenant_id: Any, roots: Iterable[uuid.UUID]
) -> dict[uuid.UUID, DagNodeAttemptExecution]:
    """Root execution id -> the earlier attempt's link (run with its DAG, node, shard) of the
    chains among `roots` that a re-run superseded; they have no DagNodeExecution any more."""
    roots = set(roots)
    if not roots:
        return {}
    return {
        row.execution_root_id: row
        for row in DagNodeAttemptExecution.objects.select_related("run", "run__dag").filter(
            execution_root_id__in=roots, run__tenant_id=tenant_id
        )
    }
