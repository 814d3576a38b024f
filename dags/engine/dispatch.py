"""Dispatch: executions for the nodes that became ready, written in one statement, their doorbells
rung after commit, one of them handed on to the finishing worker.

What a finishing DAG node hands on to the process that finished it: one ready successor it
runs itself, right after the finish commits, instead of ringing its doorbell and waiting for
the broker to hand it to some pool process (the broker round trip, the worker's consumer
loop and the hand-over to a child are most of a chain's inter-node latency).

The worker makes a `HandOn` for the message it runs and passes it down its finish (explicitly,
through `runs.finish` into the engine: no thread-local); the engine offers it at most one
node per finished run, and the worker takes what it was handed once the finish returned.

How it stays safe:
* Only a worker makes one, so the reaper, the API or the beat never hand anything on.
* At most one node per finished run, of the tier the worker took the run from, while the
  time budget lasts (DAG_CONTINUATION_SECONDS from the first run the message brought, so
  one chain does not hold a pool process for ever while other work waits in the broker);
  every other ready node rings its doorbell.
* The kept execution is an ordinary `queued` row written in the finishing transaction,
  under the finishing worker's id; the hand-on learns its id only once that transaction
  commits (a rollback hands nothing on). The worker then claims it with the usual
  compare-and-swap, so it runs once, with a lease, cancel watcher and quotas like any run.
  If the worker dies between the commit and the claim, the dead-worker reaper rings it
  for the fleet (`worker_kept_runs_ring`), or the beat's reconciler republishes it after
  SCHEDULER_REQUEUE_GRACE. A worker killed while running it leaves a running row with a
  lease: the reaper re-queues it as the same attempt (`scheduler_app.services.losses`).

How dispatched DAG nodes reach a worker, inside the transaction that made them ready.

* Their executions and links (node -> execution) are written and their state rows become
  `queued` in one statement, however many there are (on PostgreSQL two INSERTs and an
  UPDATE fed by arrays, in one round trip; a 500-wide fan-out is not 500 CASE branches).
* One of them may be handed on to the worker that finished the upstream node, which runs
  it right after the commit (`HandOn`, above): no doorbell for that one.
* The others ring their doorbells after commit, in one `ring` (a wide wave in batch
  doorbells, `scheduler_app.ringing.publish.batch_size`). Each carries a sticky hint naming the
  worker whose node made it ready, so ringing (`scheduler_app.ringing.sticky.route`)
  sends it to that worker's own queue while the worker has free slots (its inputs and
  caches are warm there), else to the tier queue.

Dispatch of ready DAG nodes: an execution for each plain node, shards for a mapped one.

Runs in the transaction that made the nodes ready (the run row locked). A wave of plain
nodes is written and rung together (above); a mapped node's shards are
rung after commit as the header of a Celery chord whose body joins them
(`dags.engine.mapping`, the join side).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from celery import chord
from celery import current_app as app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from budgets.limits import BudgetExceeded
from dags.choices import FailurePolicy, NodeStatus
from dags.conditions import is_missing, resolve_path
from dags.engine.flow_starts import node_flow_starts
from dags.engine.state import NodeLink, link_remember, node_set_final
from dags.graph import Graph
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.versions import dispatch_tasks, node_tasks_of_version
from scheduler_app import db_rows
from scheduler_app.capabilities import queue_for
from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.publish import batch_size
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.sticky import sticky_hints_set


@dataclass
class HandOn:
    """`worker_id`: the worker finishing the node (its successors prefer it: sticky
    routing). `tier`: the queue it took its run from; None hands nothing on (sticky hints
    only)."""

    worker_id: str = ""
    tier: str | None = None
    deadline: float = 0.0
    _offered: bool = False
    _kept: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_worker(cls, *, worker_id: str, tier: str | None) -> HandOn:
        """A worker's, for one message; it hands nothing on where the budget is 0."""
        budget = settings.DAG_CONTINUATION_SECONDS
        if not tier or budget <= 0:
            return cls(worker_id=worker_id)
        return cls(worker_id=worker_id, tier=tier, deadline=time.monotonic() + budget)

    def offer(self, *, queue: str) -> bool:
        """May the node about to be dispatched (an execution of tier `queue`) be run by this
        process right after the current transaction commits? True at most once per
        finished run (a batch's lanes share one hand-on: the first to ask is kept)."""
        if self.tier is None or queue != self.tier or time.monotonic() > self.deadline:
            return False
        with self._lock:
            if self._offered or self._kept:
                return False
            self._offered = True
            return True

    def accept(self, execution_id: str) -> None:
        """The offered node's row is written in this transaction: hand it on once the
        transaction commits."""
        transaction.on_commit(lambda: self._kept.append(execution_id))

    def take(self) -> str | None:
        """The id of the node to run now, or None; the next finished run may be offered
        one again."""
        with self._lock:
            self._offered = False
            return self._kept.pop(0) if self._kept else None


logger = logging.getLogger(__name__)


def node_executions_write(
    *, run: DagRun, states: Sequence[DagNodeState], executions: Sequence[TaskExecution], now
) -> None:
    """Write a dispatch wave: each state's new execution (`state.execution_id`, in the order
    of `executions`), its link to the node, and the state made queued: one statement however
    many nodes the wave has (arrays bound on the server: for a 500-wide fan-out the ORM's bulk
    insert and a VALUES list cost more in Python than in the database, and the wave's workers
    wait for this transaction)."""
    encoder = TaskExecution._meta.get_field("parameters").encoder
    params: list[object] = [
        Trigger.DAG.value,
        ExecutionStatus.QUEUED.value,
        now,
        [e.id for e in executions],
        [e.task_id for e in executions],
        [e.priority for e in executions],
        [e.queue for e in executions],
        [e.scheduled_at for e in executions],
        [e.max_attempts for e in executions],
        [
            None if e.parameters is None else json.dumps(e.parameters, cls=encoder)
            for e in executions
        ],
        [e.worker_id or "" for e in executions],
        run.tenant_id,
        run.traceparent,
        [s.id for s in states],
        [s.node_id for s in states],
        run.id,
        NodeStatus.QUEUED.value,
        now,
        now,
    ]
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(_wave_sql(), params, prepare=db_rows.prepare_statements())


@cache
def _wave_sql() -> str:
    executions = TaskExecution._meta.db_table
    links = DagNodeExecution._meta.db_table
    states = DagNodeState._meta.db_table
    # Identifiers come from the models' metadata; every value is a bound parameter. The
    # columns are those the scheduler's own batch insert writes, and the parameters.
    return (
        "WITH fixed AS (SELECT %s::text AS trigger, %s::text AS status, "  # noqa: S608
        "%s::timestamptz AS now), "
        "e AS (SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::int[], %s::text[], "
        "%s::timestamptz[], %s::int[], %s::text[], %s::text[]) WITH ORDINALITY "
        "AS e(id, task_id, priority, queue, scheduled_at, max_attempts, parameters, worker_id, "
        "position)), "
        f"inserted AS (INSERT INTO {executions} (id, tenant_id, task_id, status, trigger, "
        "priority, queue, scheduled_at, queued_at, attempt, max_attempts, root_execution_id, "
        "parameters, worker_id, error_message, error_class, dead_lettered, created_at, "
        "updated_at, traceparent) SELECT e.id, %s, e.task_id, fixed.status, fixed.trigger, "
        "e.priority, e.queue, e.scheduled_at, e.scheduled_at, 1, e.max_attempts, e.id, "
        "e.parameters::jsonb, e.worker_id, '', '', false, fixed.now, fixed.now, %s::text "
        "FROM e, fixed), "
        "v AS (SELECT s.state_id, e.id AS execution_id, s.node_id "
        "FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS s(state_id, node_id, position) "
        "JOIN e USING (position)), "
        f"linked AS (INSERT INTO {links} (execution_root_id, run_id, node_id, shard_index, "
        "status, result) SELECT v.execution_id, %s, v.node_id, NULL, '', NULL FROM v) "
        f"UPDATE {states} AS s SET status = %s, execution_id = v.execution_id, attempts = 1, "
        "started_at = %s, updated_at = %s FROM v WHERE s.id = v.state_id"
    )


def node_execution_keep(
    executions: Sequence[tuple[str, TaskExecution]],
    *,
    prefer_worker: str,
    hand_on: HandOn | None = None,
) -> tuple[str, TaskExecution] | None:
    """Before the rows are written: the (node id, execution) the worker finishing the
    upstream node will run itself, if any. Its row is written under that worker's id, so
    that if the worker dies before claiming it the dead-worker reaper rings it for the fleet
    (`worker_kept_runs_ring`) within seconds."""
    if hand_on is None:
        return None
    for node_id, execution in executions:
        if hand_on.offer(queue=execution.queue):
            execution.worker_id = prefer_worker
            return node_id, execution
    return None


def node_executions_ring(
    *,
    run: DagRun,
    executions: Sequence[tuple[str, TaskExecution]],
    kept: tuple[str, TaskExecution] | None,
    prefer_worker: str = "",
    hand_on: HandOn | None = None,
) -> None:
    """Ring the doorbells of new node executions after commit, but for the `kept` one
    (`node_execution_keep`), which is handed to this worker instead (`executions` are
    (node id, execution) pairs)."""
    if kept is not None and hand_on is not None:
        node_id, execution = kept
        _link_remember(run=run, node_id=node_id, execution_id=execution.id)
        hand_on.accept(str(execution.id))
    bells = [
        Doorbell(
            str(e.id),
            str(run.tenant_id),
            e.queue,
            task_id=str(e.task_id),
            traceparent=e.traceparent,
        )
        for _, e in executions
        if kept is None or e is not kept[1]
    ]
    if not bells:
        return

    def ring_now() -> None:
        if prefer_worker:
            _sticky_hints_set(bells, worker_id=prefer_worker)
        ring(bells, batch=settings.SCHEDULER["DOORBELL_BATCH"])

    transaction.on_commit(ring_now)


def wave_batch(nodes: int) -> int:
    """Nodes per chord header member for a map of `nodes` shards: as for a wave's doorbells
    (`scheduler_app.ringing.publish.batch_size`)."""
    return batch_size(nodes, settings.SCHEDULER["DOORBELL_BATCH"])


def _sticky_hints_set(bells: Sequence[Doorbell], *, worker_id: str) -> None:
    try:
        sticky_hints_set(execution_ids=[bell.execution_id for bell in bells], worker_id=worker_id)
    except Exception:  # stickiness is an optimisation: the doorbells ring to their tier
        logger.exception("could not record sticky hints for %d DAG nodes", len(bells))


def _link_remember(*, run: DagRun, node_id: str, execution_id: uuid.UUID) -> None:
    """This process will run the execution: it need not read back the link it just wrote."""
    link_remember(
        NodeLink(
            run_id=run.id,
            version_id=run.version_id,
            node_id=node_id,
            shard_index=None,
            execution_root_id=execution_id,
        )
    )


MAP_SHARD_TASK = "dags.run_map_shard"
MAP_SHARDS_TASK = "dags.run_map_shards"
MAP_JOIN_TASK = "dags.join_map"


def node_retries(graph: Graph, node_id: str) -> bool:
    node = graph.nodes[node_id]
    if "map_over" in node:
        return False
    return FailurePolicy.RETRY in (graph.failure_policy, node.get("failure_policy"))


def policy_overrides(graph: Graph, node_id: str) -> dict[str, Any]:
    """The retry policy of a node: the DAG's, with the node's own on top."""
    return {**graph.retry_policy, **(graph.nodes[node_id].get("retry_policy") or {})}


def node_max_attempts(graph: Graph, node_id: str, *, task_max_attempts: int) -> int:
    """How many attempts a node's execution chain gets when it is dispatched."""
    if not node_retries(graph, node_id):
        return task_max_attempts
    return int(policy_overrides(graph, node_id).get("max_attempts", task_max_attempts))


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
        # The node's run continues the DAG run's trace, as one of its children.
        traceparent=run.traceparent,
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
    tasks = dispatch_tasks(
        {node_tasks[state.node_id] for state in states}, version_id=run.version_id
    )
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
    # Singleton and debounced nodes join their key's run or start their own there.
    states, executions = node_flow_starts(
        run=run, states=states, executions=executions, tasks=tasks
    )
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
    task_id = node_tasks_of_version(run.version_id)[node_id]
    task = dispatch_tasks({task_id}, version_id=run.version_id)[task_id]
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
