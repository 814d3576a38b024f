"""Dispatch of ready DAG nodes: an execution for each plain node, shards for a mapped one.

Runs in the transaction that made the nodes ready (the run row locked). A wave of plain
nodes is written and rung together (`dags.services.doorbells`); a mapped node's shards are
rung after commit as the header of a Celery chord whose body joins them
(`dags.services.mapping`, the join side).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from celery import chord
from celery import current_app as app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from budgets.limits import BudgetExceeded
from dags.choices import NodeStatus
from dags.conditions import is_missing, resolve_path
from dags.graph import Graph
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.counting import node_set_final
from dags.services.doorbells import (
    node_execution_keep,
    node_executions_ring,
    node_executions_write,
    wave_batch,
)
from dags.services.hand_on import HandOn
from dags.services.node_retry import node_max_attempts
from dags.versions import node_tasks_of_version
from scheduler_app.capabilities import queue_for
from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution

MAP_SHARD_TASK = "dags.run_map_shard"
MAP_SHARDS_TASK = "dags.run_map_shards"
MAP_JOIN_TASK = "dags.join_map"


def upstream_view(run: DagRun, node_ids: set[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The results and statuses of a run's nodes (what a condition or a map_over reads)."""
    rows = DagNodeState.objects.filter(run=run, node_id__in=node_ids).values_list(
        "node_id", "status", "result"
    )
    results, statuses = {}, {}
    for node_id, status, result in rows:
        statuses[node_id] = status
        results[node_id] = result
    return results, statuses


def node_parameters(*, run: DagRun, graph: Graph, node: dict[str, Any]) -> dict[str, Any]:
    """The parameters a node's execution carries, merged (later wins): the DAG's
    `parameters`, the node's `parameters`, the run's trigger parameters. The worker lays
    them over the task's own parameters (for an inline node those are the node's), and a
    fan-out shard's `item` goes on top."""
    return {**graph.parameters, **(node.get("parameters") or {}), **(run.parameters or {})}


# What `_new_execution` reads of a task (its queue comes from its priority and capability);
# a field left out of `.only()` would be loaded by a query of its own, per task.
_DISPATCH_FIELDS = ("id", "tenant_id", "priority", "max_attempts", "capability")


def _new_execution(
    *,
    run: DagRun,
    task: TaskDefinition,
    parameters: dict | None,
    now: datetime,
    max_attempts: int | None = None,
) -> TaskExecution:
    execution_id = uuid.uuid4()
    return TaskExecution(
        id=execution_id,
        tenant_id=run.tenant_id,
        task_id=task.id,
        status=ExecutionStatus.QUEUED,
        trigger=Trigger.DAG,
        priority=task.priority,
        queue=queue_for(priority=task.priority, capability=task.capability),
        scheduled_at=now,
        queued_at=now,
        attempt=1,
        max_attempts=task.max_attempts if max_attempts is None else max_attempts,
        root_execution_id=execution_id,
        parameters=parameters,
    )


def nodes_dispatch(
    *,
    run: DagRun,
    graph: Graph,
    states: list[DagNodeState],
    prefer_worker: str = "",
    hand_on: HandOn | None = None,
) -> None:
    """One execution per node, all in a few statements; the doorbells ring after commit
    (but for one node that the worker finishing the upstream node may run itself)."""
    node_tasks = node_tasks_of_version(run.version_id)
    task_ids = {node_tasks[state.node_id] for state in states}
    tasks = {
        str(task.id): task
        for task in TaskDefinition.objects.filter(id__in=task_ids).only(*_DISPATCH_FIELDS)
    }
    now = timezone.now()
    executions = []
    for index, state in enumerate(states):
        node = graph.nodes[state.node_id]
        parameters = node_parameters(run=run, graph=graph, node=node)
        # UNIQUE(task, scheduled_at, attempt): nodes that reference the same task get
        # distinct microseconds.
        task = tasks[node_tasks[state.node_id]]
        execution = _new_execution(
            run=run,
            task=task,
            parameters=parameters or None,
            now=now + timedelta(microseconds=index),
            max_attempts=node_max_attempts(
                graph, state.node_id, task_max_attempts=task.max_attempts
            ),
        )
        executions.append(execution)
        state.execution_id = execution.id
    pairs = [(state.node_id, e) for state, e in zip(states, executions, strict=True)]
    kept = node_execution_keep(pairs, prefer_worker=prefer_worker, hand_on=hand_on)
    node_executions_write(run=run, states=states, executions=executions, now=now)
    node_executions_ring(
        run=run, executions=pairs, kept=kept, prefer_worker=prefer_worker, hand_on=hand_on
    )


def mapped_node_dispatch(*, run: DagRun, graph: Graph, node_id: str) -> str | None:
    """Shards for a map_over node, rung as a chord after commit. Returns a final status when
    the node ended at once (an empty list, or a map_over field that is not a list)."""
    node = graph.nodes[node_id]
    task = TaskDefinition.objects.only(*_DISPATCH_FIELDS).get(
        id=node_tasks_of_version(run.version_id)[node_id]
    )
    now = timezone.now()
    base_parameters = node_parameters(run=run, graph=graph, node=node)
    items, problem = _map_items(run=run, graph=graph, node=node)
    if problem:
        node_set_final(
            run=run, node_id=node_id, status=NodeStatus.FAILED, result=None, error=problem
        )
        return NodeStatus.FAILED
    if not items:
        node_set_final(run=run, node_id=node_id, status=NodeStatus.SUCCESS, result={"results": []})
        return NodeStatus.SUCCESS
    # UNIQUE(task, scheduled_at, attempt): shards of one node share the task, so each gets
    # its own microsecond.
    shards = [
        _new_execution(
            run=run,
            task=task,
            parameters={**base_parameters, "item": item},
            now=now + timedelta(microseconds=index),
        )
        for index, item in enumerate(items)
    ]
    TaskExecution.objects.bulk_create(shards, batch_size=500)
    DagNodeExecution.objects.bulk_create(
        [
            DagNodeExecution(
                execution_root_id=shard.id, run=run, node_id=node_id, shard_index=index
            )
            for index, shard in enumerate(shards)
        ],
        batch_size=500,
    )
    DagNodeState.objects.filter(run=run, node_id=node_id).update(
        status=NodeStatus.RUNNING,
        map_total=len(shards),
        map_finished=0,
        attempts=1,
        started_at=now,
        updated_at=now,
    )
    ids = [str(shard.id) for shard in shards]
    queue = shards[0].queue
    run_id = str(run.id)
    transaction.on_commit(
        lambda: map_chord_send(execution_ids=ids, run_id=run_id, node_id=node_id, queue=queue)
    )
    return None


def _map_items(*, run: DagRun, graph: Graph, node: dict[str, Any]) -> tuple[list, str]:
    """The items to fan out over, or a problem that fails the node before anything is
    created: not a list, or more items than DAG_MAX_MAP_ITEMS. A list written in the
    definition was capped when it was saved; one from an upstream result is capped here,
    and so is a written one saved under a looser cap."""
    spec = node["map_over"]
    cap = settings.DAG_MAX_MAP_ITEMS
    if "items" in spec:
        items = list(spec["items"])
    else:
        results, statuses = upstream_view(run, graph.ancestors(node["id"]))
        try:
            value = resolve_path(
                spec["field"], results=results, statuses=statuses, budget=expression_budget()
            )
        except BudgetExceeded as error:
            return [], f"map_over field over its {error.budget} budget: {error.message}"
        if is_missing(value) or not isinstance(value, list):
            return [], f"map_over field {spec['field']!r} is not a list in the upstream result"
        items = value
    if len(items) > cap:
        return [], (
            f"map_over has {len(items)} items; a node fans out to at most {cap} "
            "(DAG_MAX_MAP_ITEMS): nothing was run"
        )
    return items, ""


def map_chord_send(*, execution_ids: list[str], run_id: str, node_id: str, queue: str) -> None:
    """The chord: a wide map's shards go in header members of several shards each (one
    claim per member, see `workers.runner`), a narrow one's one shard per member."""
    size = wave_batch(len(execution_ids))
    groups = [execution_ids[i : i + size] for i in range(0, len(execution_ids), size)]
    header = [
        app.signature(MAP_SHARD_TASK, args=[group[0]], queue=queue, immutable=True)
        if len(group) == 1
        else app.signature(MAP_SHARDS_TASK, args=[group], queue=queue, immutable=True)
        for group in groups
    ]
    body = app.signature(MAP_JOIN_TASK, args=[run_id, node_id], queue=queue, immutable=True)
    chord(header, app=app)(body)
