"""The DAG run engine: node readiness, dispatch, completion and run completion.

Every function here runs inside the transaction of the event that caused it (a node's
execution finishing, a trigger, a cancel) and starts by locking the run row (a node's
completion does so in the statement that counts it, see `counting`): all state changes of
one run are serialized, so "remaining_upstream reached 0" and "the run has no node left"
are each observed by exactly one transaction. Doorbells and chords are sent after commit;
a lost one is republished by the beat's reconciler (the database stays the source of
truth).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from dags.choices import (
    ACTIVE_NODE_STATUSES,
    FAILED_NODE_STATUSES,
    FailurePolicy,
    NodeStatus,
    RunStatus,
    TriggerRule,
)
from dags.conditions import condition_holds, is_missing, resolve_path
from dags.graph import Graph, graph_of_version, node_tasks_of_version
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.counting import Counted, node_end_and_count
from dags.services.doorbells import (
    node_execution_keep,
    node_executions_ring,
    node_executions_write,
)
from dags.services.event_waits import event_wait_begin
from dags.services.links import run_lock
from dags.services.node_retry import node_max_attempts, node_retries, node_retry
from scheduler_app.capabilities import queue_for
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus, Trigger
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.run_signals import cancel_request

logger = logging.getLogger(__name__)

RUN, SKIP, UPSTREAM_FAILED = "run", NodeStatus.SKIPPED, NodeStatus.UPSTREAM_FAILED


def lock_run(run_id: uuid.UUID) -> DagRun:
    return run_lock(run_id)


def decide(*, rule: str, policy: str, succeeded: int, failed: int, skipped: int) -> str:
    """What a node whose upstream all ended does: run, be skipped, or be upstream_failed."""
    if succeeded + failed + skipped == 0 or rule == TriggerRule.ALL_DONE:
        return RUN
    failure_blocks = failed > 0 and policy != FailurePolicy.CONTINUE
    if rule == TriggerRule.ONE_SUCCESS:
        if succeeded > 0:
            return RUN
        if failure_blocks:
            return UPSTREAM_FAILED
        return RUN if failed > 0 else SKIP
    if failure_blocks:
        return UPSTREAM_FAILED
    return SKIP if skipped > 0 else RUN


# -- readiness and dispatch ---------------------------------------------------------------
def nodes_ready(
    *,
    run: DagRun,
    node_ids: Iterable[str],
    known: dict[str, DagNodeState] | None = None,
    prefer_worker: str = "",
) -> None:
    """Nodes whose remaining_upstream is 0: run, skip or fail each; propagate what ended.

    Works in waves: every node of a wave that simply runs is dispatched in one batch (one
    INSERT of executions, one of links, one UPDATE of states, one publish), which is what
    keeps a 500-wide fan-out from costing 500 round trips of each. `known` holds states the
    caller just read (the counters' UPDATE ... RETURNING): those are not read again.
    `prefer_worker` is the worker whose finished node made these ready (sticky routing).
    """
    graph = graph_of_version(run.version_id)
    todo = list(dict.fromkeys(node_ids))
    known = dict(known or {})
    while todo and run.status == RunStatus.RUNNING:
        wave, todo = todo, []
        states = {node_id: known.pop(node_id) for node_id in wave if node_id in known}
        unknown = [node_id for node_id in wave if node_id not in states]
        if unknown:
            states.update(
                (state.node_id, state)
                for state in DagNodeState.objects.filter(
                    run=run, node_id__in=unknown, status=NodeStatus.WAITING
                )
            )
        to_dispatch: list[DagNodeState] = []
        for node_id in wave:
            state = states.get(node_id)
            if state is None:
                continue
            node = graph.nodes[node_id]
            verdict = decide(
                rule=node["trigger_rule"],
                policy=graph.failure_policy,
                succeeded=state.upstream_succeeded,
                failed=state.upstream_failed,
                skipped=state.upstream_skipped,
            )
            if verdict == RUN and "condition" in node:
                results, statuses = _upstream_view(run, graph.ancestors(node_id))
                if not condition_holds(node["condition"], results=results, statuses=statuses):
                    verdict = SKIP
            if verdict == RUN and "wait_for_event" in node:
                # No execution: it waits (no worker slot) unless its event already came.
                event = event_wait_begin(run=run, node_id=node_id, spec=node["wait_for_event"])
                if event is None:
                    continue
                ended = NodeStatus.SUCCESS
                _node_set_final(run=run, node_id=node_id, status=ended, result=event.payload)
            elif verdict == RUN and "map_over" not in node:
                to_dispatch.append(state)
                continue
            elif verdict == RUN:
                ended = _dispatch_mapped(run=run, graph=graph, node_id=node_id)
            else:
                ended = verdict
                _node_set_final(run=run, node_id=node_id, status=verdict, result=None)
            if ended is not None:
                ready = _node_ended(run=run, graph=graph, node_id=node_id, status=ended)
                known.update(ready)
                todo.extend(ready)
                if run.status != RunStatus.RUNNING:
                    return
        if to_dispatch:
            _dispatch_plain(run=run, graph=graph, states=to_dispatch, prefer_worker=prefer_worker)
        todo = list(dict.fromkeys(todo))


def _upstream_view(run: DagRun, node_ids: set[str]) -> tuple[dict[str, Any], dict[str, str]]:
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
    node: dict[str, Any],
    parameters: dict | None,
    now,
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
        queue=queue_for(priority=task.priority, handler_type=task.handler_type),
        scheduled_at=now,
        queued_at=now,
        attempt=1,
        max_attempts=task.max_attempts if max_attempts is None else max_attempts,
        root_execution_id=execution_id,
        parameters=parameters,
    )


def _dispatch_plain(
    *, run: DagRun, graph: Graph, states: list[DagNodeState], prefer_worker: str = ""
) -> None:
    """One execution per node, all in a few statements; the doorbells ring after commit
    (but for one node that the worker finishing the upstream node may run itself)."""
    node_tasks = node_tasks_of_version(run.version_id)
    task_ids = {node_tasks[state.node_id] for state in states}
    tasks = {
        str(task.id): task
        for task in TaskDefinition.objects.filter(id__in=task_ids).only(
            "id", "priority", "max_attempts", "tenant_id"
        )
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
            node=node,
            parameters=parameters or None,
            now=now + timedelta(microseconds=index),
            max_attempts=node_max_attempts(
                graph, state.node_id, task_max_attempts=task.max_attempts
            ),
        )
        executions.append(execution)
        state.execution_id = execution.id
    pairs = [(state.node_id, e) for state, e in zip(states, executions, strict=True)]
    kept = node_execution_keep(pairs, prefer_worker=prefer_worker)
    node_executions_write(run=run, states=states, executions=executions, now=now)
    node_executions_ring(run=run, executions=pairs, kept=kept, prefer_worker=prefer_worker)


def _dispatch_mapped(*, run: DagRun, graph: Graph, node_id: str) -> str | None:
    """Shards for a map_over node, rung as a chord after commit. Returns a final status when
    the node ended at once (an empty list, or a map_over field that is not a list)."""
    node = graph.nodes[node_id]
    task = TaskDefinition.objects.only("id", "priority", "max_attempts", "tenant_id").get(
        id=node_tasks_of_version(run.version_id)[node_id]
    )
    now = timezone.now()
    base_parameters = node_parameters(run=run, graph=graph, node=node)
    items, problem = _map_items(run=run, graph=graph, node=node)
    if problem:
        _node_set_final(
            run=run, node_id=node_id, status=NodeStatus.FAILED, result=None, error=problem
        )
        return NodeStatus.FAILED
    if not items:
        _node_set_final(run=run, node_id=node_id, status=NodeStatus.SUCCESS, result={"results": []})
        return NodeStatus.SUCCESS
    # UNIQUE(task, scheduled_at, attempt): shards of one node share the task, so each gets
    # its own microsecond.
    shards = [
        _new_execution(
            run=run,
            task=task,
            node=node,
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
    from dags.services.mapping import send_map_chord

    ids = [str(shard.id) for shard in shards]
    queue = shards[0].queue
    run_id = str(run.id)
    transaction.on_commit(
        lambda: send_map_chord(execution_ids=ids, run_id=run_id, node_id=node_id, queue=queue)
    )
    return None


def _map_items(*, run: DagRun, graph: Graph, node: dict[str, Any]) -> tuple[list, str]:
    spec = node["map_over"]
    if "items" in spec:
        return list(spec["items"]), ""
    results, statuses = _upstream_view(run, graph.ancestors(node["id"]))
    value = resolve_path(spec["field"], results=results, statuses=statuses)
    if is_missing(value) or not isinstance(value, list):
        return [], f"map_over field {spec['field']!r} is not a list in the upstream result"
    return value, ""


# -- completion ------------------------------------------------------------------------
def _node_set_final(
    *,
    run: DagRun,
    node_id: str,
    status: str,
    result: Any,
    error: str = "",
    execution_id: uuid.UUID | None = None,
) -> bool:
    now = timezone.now()
    states = DagNodeState.objects.filter(run=run, node_id=node_id, status__in=ACTIVE_NODE_STATUSES)
    if execution_id is not None:
        # Only the node's current execution may end it (not one from before a re-run).
        states = states.filter(execution_id=execution_id)
    return (
        states.update(
            status=status,
            result=result,
            error_message=error[:4000],
            completed_at=now,
            updated_at=now,
        )
        == 1
    )


def node_complete(
    *,
    run: DagRun,
    node_id: str,
    status: str,
    result: Any,
    error: str = "",
    execution_id: uuid.UUID | None = None,
    worker_id: str = "",
) -> None:
    """A node's execution chain ended (success, or failed with no attempt left). The run
    row is locked by the caller."""
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
        _counted_move_on(run=run, ready=counted.ready, worker_id=worker_id)
        return
    if not _node_set_final(
        run=run,
        node_id=node_id,
        status=status,
        result=result,
        error=error,
        execution_id=execution_id,
    ):
        return
    ready = _node_ended(run=run, graph=graph, node_id=node_id, status=status)
    if ready and run.status == RunStatus.RUNNING:
        nodes_ready(run=run, node_ids=list(ready), known=ready, prefer_worker=worker_id)


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
        _counted_move_on(run=counted.run, ready=counted.ready, worker_id=worker_id)
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


def _counted_move_on(*, run: DagRun, ready: dict[str, DagNodeState], worker_id: str) -> None:
    if run.remaining_nodes == 0:
        run_finalize(run=run)
    if ready and run.status == RunStatus.RUNNING:
        nodes_ready(run=run, node_ids=list(ready), known=ready, prefer_worker=worker_id)


def _node_ended(*, run: DagRun, graph: Graph, node_id: str, status: str) -> dict[str, DagNodeState]:
    """Count a final node into its downstream nodes and into the run. Returns the
    downstream nodes that became ready (all upstream ended), with their counters."""
    failed = status in FAILED_NODE_STATUSES
    if failed and graph.failure_policy == FailurePolicy.FAIL_ALL:
        run_abort(run=run, status=RunStatus.FAILED, reason=f"node {node_id!r} failed")
        return {}
    children = graph.downstream[node_id]
    ready = (
        _count_into_children(
            run=run,
            children=children,
            succeeded=int(status == NodeStatus.SUCCESS),
            failed=int(failed),
            skipped=int(status == NodeStatus.SKIPPED),
        )
        if children
        else {}
    )
    DagRun.objects.filter(id=run.id).update(remaining_nodes=F("remaining_nodes") - 1)
    run.remaining_nodes -= 1
    if run.remaining_nodes == 0:
        run_finalize(run=run)
    return ready


def _count_into_children(
    *, run: DagRun, children: tuple[str, ...], succeeded: int, failed: int, skipped: int
) -> dict[str, DagNodeState]:
    """Decrement the children's remaining_upstream in one statement; returns those at 0
    (their counters come back with the UPDATE, so readiness needs no second read)."""
    table = DagNodeState._meta.db_table
    placeholders = ", ".join(["%s"] * len(children))
    # Identifiers come from the model's metadata; every value is a bound parameter.
    sql = (
        f"UPDATE {table} SET remaining_upstream = remaining_upstream - 1, "  # noqa: S608
        "upstream_succeeded = upstream_succeeded + %s, "
        "upstream_failed = upstream_failed + %s, "
        "upstream_skipped = upstream_skipped + %s "
        f"WHERE run_id = %s AND status = %s AND node_id IN ({placeholders}) "
        "RETURNING id, node_id, remaining_upstream, upstream_succeeded, upstream_failed, "
        "upstream_skipped"
    )
    run_id = DagNodeState._meta.get_field("run").target_field.get_db_prep_value(
        run.id, connection, prepared=False
    )
    params = [succeeded, failed, skipped, run_id, NodeStatus.WAITING.value, *children]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {
        node_id: DagNodeState(
            id=state_id,
            run_id=run.id,
            node_id=node_id,
            status=NodeStatus.WAITING,
            remaining_upstream=0,
            upstream_succeeded=ok,
            upstream_failed=bad,
            upstream_skipped=skipped_count,
        )
        for state_id, node_id, remaining, ok, bad, skipped_count in sorted(rows, key=lambda r: r[1])
        if remaining == 0
    }


def run_finalize(*, run: DagRun) -> None:
    statuses = set(DagNodeState.objects.filter(run=run).values_list("status", flat=True))
    if statuses & set(FAILED_NODE_STATUSES):
        final = (
            RunStatus.PARTIALLY_COMPLETED if NodeStatus.SUCCESS in statuses else RunStatus.FAILED
        )
    else:
        final = RunStatus.SUCCESS
    _run_end(run=run, status=final)


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
        from dags.services.runs import queued_runs_start

        queued_runs_start(dag_id=run.dag_id)
    return ended


def run_abort(*, run: DagRun, status: str, reason: str) -> None:
    """fail_all or a cancel: end the run now, cancel every node that has not ended and
    every execution of it that has not started, and tell the workers running the others to
    kill them (after commit; their node is already cancelled, so a late result is ignored)."""
    was_queued = run.status == RunStatus.QUEUED
    if was_queued:
        DagRun.objects.filter(id=run.id, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING)
        run.status = RunStatus.RUNNING
    if not _run_end(run=run, status=status):
        return
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


def _running_executions_stop(execution_ids: list[str]) -> None:
    """The same signal as `POST /executions/{id}/cancel`: the worker kills the run."""
    for execution_id in execution_ids:
        try:
            cancel_request(execution_id=execution_id)
        except Exception:  # Redis away: the run finishes on its own and is ignored
            logger.exception("could not ask the worker to stop execution %s", execution_id)
