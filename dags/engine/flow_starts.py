"""Singleton and debounce on DAG nodes: a node's start that joins its key's run instead of
making one (issue 29, item 4; the task side is `scheduler_app/services/flow_triggers.py`,
whose key lock and join this module calls, so a node behaves as a task's trigger does).

An inline node (one with a `handler`) may say

    "singleton": {"key": "{{ parameters.customer_id }}"}
    "debounce":  {"key": "{{ parameters.customer_id }}", "seconds": 30}

which its hidden task carries (validated with it, as a task's fields). When such a node of a
run is dispatched, under the key's transaction-scoped advisory lock:

* singleton: if the node's task has an active run of the key (pending, queued or running,
  from any run of the DAG), this node *joins* it: no execution is made; the node's state
  points at that run's chain (`execution_id`), mirrors its status, and a `DagNodeJoin` row
  says so. When the chain ends, every node that joined it ends with the same outcome (status,
  result, error), each in its own run, in the finishing transaction (`flow_joins`). Else the
  node's execution is made as usual, with the key.
* debounce: if the node's task has a pending run of the key (a window still open), this
  node joins it the same way, and the run takes this start's parameters and is put off to
  `seconds` from now (never past `max_wait_seconds` after its first start). Else the node's
  execution is made `pending`, due `seconds` from now; the beat leader rings it when it is
  due, as it does a retry or a debounced task's run.

The scope is the node's task: an unchanged node keeps its task across the DAG's versions, so
its key's run is shared across them; a node changed in a new version has a new task and so a
new scope. `{{ task }}` in a node's key is the node's id (its hidden task's name changes with
the version), `{{ dag }}` the DAG's name, `{{ tenant }}` the tenant's slug.

Joined nodes take the run's outcome; they do not retry it on their own (the chain's retries
are its own node's). A stopped run does not cancel a chain that another running run joined:
the chain goes on for them (`shared_roots_kept`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dags.choices import NodeStatus, RunStatus
from dags.engine.state import NodeLink, link_remember
from dags.models import Dag, DagNodeExecution, DagNodeJoin, DagNodeState, DagRun
from scheduler_app.choices import DAG_NODE_TAG, ExecutionStatus
from scheduler_app.flow_trigger_spec import DEBOUNCE, SINGLETON, KeyContext, flow_key_render
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.run_key_templates import KeyTemplateError
from scheduler_app.services.flow_triggers import FlowKey, flow_run_join, flow_run_prepare

_NODE_STATUS_OF_RUN = {
    ExecutionStatus.PENDING: NodeStatus.PENDING,
    ExecutionStatus.QUEUED: NodeStatus.QUEUED,
    ExecutionStatus.RUNNING: NodeStatus.RUNNING,
}


def node_flow_task(task: TaskDefinition) -> bool:
    """Whether a node's task takes singleton or debounce here: an inline node's hidden task
    with either. (A node naming a task of the tenant's runs as before: that task's own
    singleton and debounce are for its triggers and fires.)"""
    return bool(task.singleton or task.debounce) and DAG_NODE_TAG in (task.tags or [])


def node_flow_starts(
    *,
    run: DagRun,
    states: Sequence[DagNodeState],
    executions: Sequence[TaskExecution],
    tasks: Mapping[str, TaskDefinition],
) -> tuple[list[DagNodeState], list[TaskExecution]]:
    """Of a dispatch wave (`states[i]` runs `executions[i]`, not written yet; `tasks` by id):
    the singleton and debounced nodes started here (joined, or their own run written), the
    rest returned for the wave. Nothing is read for a wave without such nodes."""
    flowing = [index for index, e in enumerate(executions) if node_flow_task(tasks[str(e.task_id)])]
    if not flowing:
        return list(states), list(executions)
    dag_name = Dag.platform.filter(id=run.dag_id).values_list("name", flat=True).first() or ""
    slug = Tenant.objects.filter(id=run.tenant_id).values_list("slug", flat=True).first() or ""
    now = timezone.now()
    starts = []
    for index in flowing:
        state, execution = states[index], executions[index]
        task = tasks[str(execution.task_id)]
        context = KeyContext(
            parameters=execution.parameters or {}, task=state.node_id, dag=dag_name, tenant=slug
        )
        starts.append((state, execution, task, _flow_key(task, context=context)))
    # In lock order: two waves locking the same keys cannot deadlock on each other.
    for state, execution, task, flow in sorted(starts, key=lambda s: (str(s[2].id), s[3].key)):
        joined = flow_run_join(task=task, flow=flow, parameters=execution.parameters, now=now)
        if joined is None:
            _own_run_start(run=run, state=state, execution=execution, flow=flow, now=now)
        else:
            _join(run=run, state=state, joined=joined, flow=flow, now=now)
    skip = set(flowing)
    kept = [index for index in range(len(executions)) if index not in skip]
    return [states[index] for index in kept], [executions[index] for index in kept]


def _flow_key(task: TaskDefinition, *, context: KeyContext) -> FlowKey:
    kind = SINGLETON if task.singleton else DEBOUNCE
    block = task.singleton or task.debounce
    try:
        key = flow_key_render(block["key"], context=context, budget=expression_budget())
    except KeyTemplateError:
        key = context.task  # past the budget: one key for the node, as a fire's is its task's
    if kind == SINGLETON:
        return FlowKey(kind, key)
    return FlowKey(kind, key, int(block["seconds"]), int(block["max_wait_seconds"]))


def _own_run_start(
    *, run: DagRun, state: DagNodeState, execution: TaskExecution, flow: FlowKey, now: datetime
) -> None:
    """No run of the key to join: the node's own, written with its key (a debounced one
    `pending` for its window), linked and rung as a wave's would be."""
    flow_run_prepare(execution=execution, flow=flow, now=now)
    TaskExecution.objects.bulk_create([execution])
    DagNodeExecution.objects.create(execution_root_id=execution.id, run=run, node_id=state.node_id)
    link_remember(
        NodeLink(
            run_id=run.id,
            version_id=run.version_id,
            node_id=state.node_id,
            shard_index=None,
            execution_root_id=execution.id,
        )
    )
    status = _NODE_STATUS_OF_RUN[ExecutionStatus(execution.status)]
    _state_set(run=run, state=state, status=status, root=execution.id, attempts=1, now=now)
    if execution.status != ExecutionStatus.QUEUED:
        return  # a debounce window: the beat leader rings it when it is due
    bell = Doorbell(
        str(execution.id),
        str(run.tenant_id),
        execution.queue,
        task_id=str(execution.task_id),
        traceparent=execution.traceparent,
    )
    transaction.on_commit(lambda: ring([bell], batch=settings.SCHEDULER["DOORBELL_BATCH"]))


def _join(
    *, run: DagRun, state: DagNodeState, joined: TaskExecution, flow: FlowKey, now: datetime
) -> None:
    root = joined.root_execution_id or joined.id
    status = _NODE_STATUS_OF_RUN.get(ExecutionStatus(joined.status), NodeStatus.QUEUED)
    _state_set(run=run, state=state, status=status, root=root, attempts=joined.attempt, now=now)
    DagNodeJoin.objects.create(
        execution_root_id=root, run=run, node_id=state.node_id, kind=flow.kind, key=flow.key
    )


def _state_set(
    *, run: DagRun, state: DagNodeState, status: str, root: uuid.UUID, attempts: int, now
) -> None:
    DagNodeState.objects.filter(run=run, id=state.id, status=NodeStatus.WAITING).update(
        status=status, execution_id=root, attempts=attempts, started_at=now, updated_at=now
    )
    state.execution_id = root


def shared_roots_kept(roots: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Of the chains a stopping run would cancel: those that a node of another running run
    joined (its singleton or debounced node's run). They go on, for the nodes that wait on
    them; the stopping run's own node is cancelled all the same."""
    if not roots:
        return set()
    return set(
        DagNodeJoin.objects.filter(
            execution_root_id__in=list(roots), run__status=RunStatus.RUNNING
        ).values_list("execution_root_id", flat=True)
    )
