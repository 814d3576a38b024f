"""Readiness: what a node's end makes ready, runs, skips or fails; event waits; and a run's end, in
one place.

The end of a DAG run: its final status once no node is left, or an abort (fail_all, a
cancel) that ends it at once and stops what is still going.

Runs inside the transaction that ends the run, with the run row locked. Ending a run frees
one of its DAG's `max_active_runs` slots, which `run_finish` and `run_stop` fill
(`queued_runs_start`) when `run_finalize` or `run_abort` report that they ended it.

The start of a wait_for_event node (when the node becomes ready) and payload matching live
here too (`dags.services.events` has the rest).

Readiness: what an end makes ready, and what becomes of it.

A node whose upstream have all ended (remaining_upstream 0) is run, skipped or marked
upstream_failed (trigger rule, failure policy, condition); one that ends at once (skipped, an
event that already came, an empty map) is counted into its own children in turn. A run that
ends frees a slot of its DAG's `max_active_runs`, which makes its oldest queued runs ready:
their roots go through the same readiness. That recursion (a node's end, a run's end, a
queued run's roots) stays in this module, above dispatch, which knows nothing of it.

Runs inside the transaction of the event that caused it, with the run row locked: all state
changes of one run are serialized, so "remaining_upstream reached 0" and "the run has no node
left" are each observed by exactly one transaction.

A ready node with a condition is not decided in that transaction: the condition is tenant
input and may be slow, and the transaction holds the run's lock and, in a worker, the finish
of a run. It stays `waiting` (remaining_upstream 0, its updated_at stamped) and is decided
after commit, outside any transaction (`condition_verdicts`), then in a short transaction of
its own (`conditions_decide`). If the process dies in between, the beat leader's housekeeping
decides it (`dags.services.undecided`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dags.choices import (
    ACTIVE_NODE_STATUSES,
    FAILED_NODE_STATUSES,
    EventWaitStatus,
    FailurePolicy,
    NodeStatus,
    RunStatus,
    TriggerRule,
)
from dags.engine.approval_waits import approval_wait_begin
from dags.engine.dispatch import HandOn, mapped_node_dispatch, nodes_dispatch
from dags.engine.failure_streaks import dag_run_streak_count
from dags.engine.flow_starts import shared_roots_kept
from dags.engine.state import children_count, node_set_final, run_lock
from dags.engine.timers import timer_begin
from dags.graph import Graph
from dags.models import Dag, DagNodeExecution, DagNodeState, DagRun, Event, EventWait
from dags.services.condition_verdicts import Verdict, condition_verdicts
from dags.spec_timers import TIMER_TYPES
from dags.versions import graph_of_version
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus
from scheduler_app.models import TaskExecution
from scheduler_app.services.run_signals import cancel_request

logger = logging.getLogger(__name__)


def run_finalize(*, run: DagRun) -> bool:
    """No node left: the run ends success, failed or partially_completed. True when it
    ended here (its DAG's slot is free)."""
    statuses = set(DagNodeState.objects.filter(run=run).values_list("status", flat=True))
    if statuses & set(FAILED_NODE_STATUSES):
        final = (
            RunStatus.PARTIALLY_COMPLETED if NodeStatus.SUCCESS in statuses else RunStatus.FAILED
        )
    else:
        final = RunStatus.SUCCESS
    return _run_end(run=run, status=final)


def _run_end(*, run: DagRun, status: str) -> bool:
    now = timezone.now()
    ended = (
        DagRun.platform.filter(id=run.id, status=RunStatus.RUNNING).update(
            status=status, completed_at=now
        )
        == 1
    )
    if ended:
        run.status = status
        run.completed_at = now
        dag_run_streak_count(run=run, status=status)
    return ended


def run_abort(*, run: DagRun, status: str, reason: str) -> bool:
    """fail_all or a cancel: end the run now, cancel every node that has not ended and
    every execution of it that has not started, and tell the workers running the others to
    kill them (after commit; their node is already cancelled, so a late result is ignored).
    True when it ended here (its DAG's slot is free)."""
    was_queued = run.status == RunStatus.QUEUED
    if was_queued:
        DagRun.platform.filter(id=run.id, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING)
        run.status = RunStatus.RUNNING
    if not _run_end(run=run, status=status):
        return False
    now = timezone.now()
    DagNodeState.objects.filter(run=run, status__in=ACTIVE_NODE_STATUSES).update(
        status=NodeStatus.CANCELLED, error_message=reason, completed_at=now, updated_at=now
    )
    DagRun.platform.filter(id=run.id).update(remaining_nodes=0)
    links = DagNodeExecution.objects.filter(run=run)
    linked = list(links.values_list("execution_root_id", flat=True))
    # A chain another running run's node joined (singleton, debounce) goes on for it.
    kept = shared_roots_kept(linked)
    roots = [root for root in linked if root not in kept]
    TaskExecution.platform.filter(root_execution_id__in=roots, status__in=WAITING_STATUSES).update(
        status=ExecutionStatus.CANCELLED,
        completed_at=now,
        error_message=f"DAG run ended: {reason}",
        updated_at=now,
    )
    running = [
        str(execution_id)
        for execution_id in TaskExecution.platform.filter(
            root_execution_id__in=roots, status=ExecutionStatus.RUNNING
        ).values_list("id", flat=True)
    ]
    if running:
        transaction.on_commit(lambda: _running_executions_stop(running))
    return True


def _running_executions_stop(execution_ids: list[str]) -> None:
    """The same signal as `POST /executions/{id}/cancel`: the worker kills the run."""
    for execution_id in execution_ids:
        try:
            cancel_request(execution_id=execution_id)
        except Exception:  # Redis away: the run finishes on its own and is ignored
            logger.exception("could not ask the worker to stop execution %s", execution_id)


def payload_matches(match: Mapping[str, Any], payload: Any) -> bool:
    """`match` is a subset of `payload`: every key of `match` is in it with an equal value;
    nested objects are compared the same way (a subset), anything else by equality."""
    if not isinstance(payload, Mapping):
        return not match
    for key, wanted in match.items():
        if key not in payload:
            return False
        value = payload[key]
        if isinstance(wanted, Mapping):
            if not isinstance(value, Mapping) or not payload_matches(wanted, value):
                return False
        elif value != wanted:
            return False
    return True


def event_wait_begin(*, run: DagRun, node_id: str, spec: Mapping[str, Any]) -> Event | None:
    """A wait_for_event node became ready (run locked by the caller): record its wait, or,
    when a matching event was already posted since the run started, return it (the caller
    ends the node with its payload)."""
    now = timezone.now()
    since = run.started_at or run.created_at
    earlier = _first_match(
        tenant_id=run.tenant_id, name=spec["name"], match=spec["match"], since=since
    )
    EventWait.platform.update_or_create(
        run=run,
        node_id=node_id,
        defaults={
            "tenant_id": run.tenant_id,
            "name": spec["name"],
            "match": spec["match"],
            "since": since,
            "started_at": now,
            "deadline": now + timedelta(seconds=spec["timeout_seconds"]),
            "status": EventWaitStatus.RECEIVED if earlier else EventWaitStatus.WAITING,
            "event_id": earlier.id if earlier else None,
            "resolved_at": now if earlier else None,
        },
    )
    if earlier is None:
        DagNodeState.objects.filter(run=run, node_id=node_id, status=NodeStatus.WAITING).update(
            status=NodeStatus.WAITING_FOR_EVENT, started_at=now, updated_at=now
        )
    return earlier


def _first_match(
    *, tenant_id: Any, name: str, match: Mapping[str, Any], since: datetime
) -> Event | None:
    candidates = Event.objects.filter(
        tenant_id=tenant_id, name=name, created_at__gte=since
    ).order_by("created_at")
    for event in candidates.iterator(chunk_size=200):
        if payload_matches(match, event.payload):
            return event
    return None


RUN, SKIP, UPSTREAM_FAILED = "run", NodeStatus.SKIPPED, NodeStatus.UPSTREAM_FAILED
FAIL = NodeStatus.FAILED


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


def nodes_ready(
    *,
    run: DagRun,
    node_ids: Iterable[str],
    known: dict[str, DagNodeState] | None = None,
    prefer_worker: str = "",
    decided: Mapping[str, Verdict] | None = None,
    hand_on: HandOn | None = None,
) -> None:
    """Nodes whose remaining_upstream is 0: run, skip or fail each; propagate what ended.

    Works in waves: every node of a wave that simply runs is dispatched in one batch (one
    INSERT of executions, one of links, one UPDATE of states, one publish), which is what
    keeps a 500-wide fan-out from costing 500 round trips of each. `known` holds states the
    caller just read (the counters' UPDATE ... RETURNING): those are not read again.
    `prefer_worker` is the worker whose finished node made these ready (sticky routing);
    `hand_on`, what that worker may be handed to run itself (`dags.engine.dispatch`).
    A node with a condition is decided after commit (see the module's docstring) unless
    `decided` holds its verdict already.
    """
    graph = graph_of_version(run.version_id)
    todo = list(dict.fromkeys(node_ids))
    known = dict(known or {})
    decided = decided or {}
    undecided: list[str] = []
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
                if node_id not in decided:
                    undecided.append(node_id)
                    continue
                holds = decided[node_id]
                verdict = RUN if holds is True else SKIP if holds is False else FAIL
            if verdict == RUN and node.get("type") == "approval":
                # No execution: it waits (no worker slot) for its approvers or its timeout.
                approval_wait_begin(run=run, node_id=node_id, spec=node["approval"])
                continue
            if verdict == RUN and "wait_for_event" in node:
                # No execution: it waits (no worker slot) unless its event already came.
                event = event_wait_begin(run=run, node_id=node_id, spec=node["wait_for_event"])
                if event is None:
                    continue
                ended = NodeStatus.SUCCESS
                node_set_final(run=run, node_id=node_id, status=ended, result=event.payload)
            elif verdict == RUN and node.get("type") in TIMER_TYPES:
                # No execution either: a DagTimer row (dags.engine.timers), unless it ends now.
                begun = timer_begin(run=run, graph=graph, node_id=node_id, node=node)
                if begun is None:
                    continue
                ended, error = begun
                node_set_final(run=run, node_id=node_id, status=ended, result=None, error=error)
            elif verdict == RUN and "map_over" not in node:
                to_dispatch.append(state)
                continue
            elif verdict == RUN:
                ended = mapped_node_dispatch(run=run, graph=graph, node_id=node_id)
            else:
                ended = verdict
                error = str(decided[node_id]) if verdict == FAIL else ""
                node_set_final(run=run, node_id=node_id, status=verdict, result=None, error=error)
            if ended is not None:
                ready = node_ended(run=run, graph=graph, node_id=node_id, status=ended)
                known.update(ready)
                todo.extend(ready)
                if run.status != RunStatus.RUNNING:
                    return
        if to_dispatch:
            nodes_dispatch(
                run=run,
                graph=graph,
                states=to_dispatch,
                prefer_worker=prefer_worker,
                hand_on=hand_on,
            )
        todo = list(dict.fromkeys(todo))
    if undecided and run.status == RunStatus.RUNNING:
        _conditions_defer(run=run, node_ids=undecided, prefer_worker=prefer_worker)


def _conditions_defer(*, run: DagRun, node_ids: list[str], prefer_worker: str) -> None:
    """In the transaction that made them ready: stamp the nodes (the housekeeping's clock for
    a decision that never came) and decide them once it commits. `robust`: the transaction
    that made them ready has committed whatever the decision does; a failure to decide is
    logged and left to the housekeeping."""
    DagNodeState.objects.filter(run=run, node_id__in=node_ids, status=NodeStatus.WAITING).update(
        updated_at=timezone.now()
    )
    run_id = run.id
    transaction.on_commit(
        lambda: conditions_decide(run_id=run_id, node_ids=node_ids, prefer_worker=prefer_worker),
        robust=True,
    )


def conditions_decide(*, run_id: uuid.UUID, node_ids: list[str], prefer_worker: str = "") -> None:
    """Decide undecided nodes: evaluate their conditions with no transaction open (and no
    lock held), then apply the verdicts under the run's lock. A node decided meanwhile (by
    the housekeeping) is no longer waiting, and nodes_ready leaves it alone."""
    run = DagRun.platform.filter(id=run_id, status=RunStatus.RUNNING).first()
    if run is None:
        return
    verdicts = condition_verdicts(
        run=run, graph=graph_of_version(run.version_id), node_ids=node_ids
    )
    for node_id, verdict in verdicts.items():
        if isinstance(verdict, str):
            logger.warning("DAG run %s: node %s fails: %s", run_id, node_id, verdict)
    with transaction.atomic():
        locked = run_lock(run_id)
        if locked.status == RunStatus.RUNNING:
            nodes_ready(
                run=locked, node_ids=node_ids, decided=verdicts, prefer_worker=prefer_worker
            )


def node_ended(*, run: DagRun, graph: Graph, node_id: str, status: str) -> dict[str, DagNodeState]:
    """Count a final node into its downstream nodes and into the run. Returns the
    downstream nodes that became ready (all upstream ended), with their counters."""
    failed = status in FAILED_NODE_STATUSES
    if failed and graph.failure_policy == FailurePolicy.FAIL_ALL:
        run_stop(run=run, status=RunStatus.FAILED, reason=f"node {node_id!r} failed")
        return {}
    children = graph.downstream[node_id]
    ready = (
        children_count(
            run=run,
            children=children,
            succeeded=int(status == NodeStatus.SUCCESS),
            failed=int(failed),
            skipped=int(status == NodeStatus.SKIPPED),
        )
        if children
        else {}
    )
    DagRun.platform.filter(id=run.id).update(remaining_nodes=F("remaining_nodes") - 1)
    run.remaining_nodes -= 1
    if run.remaining_nodes == 0:
        run_finish(run=run)
    return ready


def run_finish(*, run: DagRun) -> None:
    """No node left: end the run with its final status, and start the queued runs its slot
    lets in."""
    if run_finalize(run=run):
        queued_runs_start(dag_id=run.dag_id)


def run_stop(*, run: DagRun, status: str, reason: str) -> None:
    """End a run now (fail_all, a cancel; see `run_end.run_abort`), and start the queued
    runs its slot lets in."""
    if run_abort(run=run, status=status, reason=reason):
        queued_runs_start(dag_id=run.dag_id)


def queued_runs_start(*, dag_id: uuid.UUID) -> None:
    """A slot freed: start the oldest queued runs that now fit under max_active_runs."""
    dag = Dag.platform.select_for_update().get(id=dag_id)
    active = DagRun.platform.filter(dag_id=dag_id, status=RunStatus.RUNNING).count()
    free = dag.max_active_runs - active
    if free <= 0:
        return
    waiting = DagRun.platform.filter(dag_id=dag_id, status=RunStatus.QUEUED).order_by("created_at")[
        :free
    ]
    for queued in waiting:
        run = run_lock(queued.id)
        if run.status != RunStatus.QUEUED:
            continue
        now = timezone.now()
        DagRun.platform.filter(id=run.id).update(status=RunStatus.RUNNING, started_at=now)
        run.status, run.started_at = RunStatus.RUNNING, now
        run_roots_start(run)


def run_roots_start(run: DagRun) -> None:
    """A run that just started: its nodes with no upstream are ready."""
    graph = graph_of_version(run.version_id)
    nodes_ready(run=run, node_ids=[n for n, node in graph.nodes.items() if not node["depends_on"]])
