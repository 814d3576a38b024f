"""Readiness: what an end makes ready, and what becomes of it.

A node whose upstream have all ended (remaining_upstream 0) is run, skipped or marked
upstream_failed (trigger rule, failure policy, condition); one that ends at once (skipped, an
event that already came, an empty map) is counted into its own children in turn. A run that
ends frees a slot of its DAG's `max_active_runs`, which makes its oldest queued runs ready:
their roots go through the same readiness. That recursion (a node's end, a run's end, a
queued run's roots) is why both live here, above dispatch (`node_dispatch`) and the run's
end (`run_end`), which know nothing of it.

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

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dags.choices import FAILED_NODE_STATUSES, FailurePolicy, NodeStatus, RunStatus, TriggerRule
from dags.graph import Graph
from dags.models import Dag, DagNodeState, DagRun
from dags.services.condition_verdicts import Verdict, condition_verdicts
from dags.services.counting import children_count, node_set_final
from dags.services.event_waits import event_wait_begin
from dags.services.hand_on import HandOn
from dags.services.links import run_lock
from dags.services.node_dispatch import mapped_node_dispatch, nodes_dispatch
from dags.services.run_end import run_abort, run_finalize
from dags.versions import graph_of_version

logger = logging.getLogger(__name__)

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
    `hand_on`, what that worker may be handed to run itself (`dags.services.hand_on`).
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
            if verdict == RUN and "wait_for_event" in node:
                # No execution: it waits (no worker slot) unless its event already came.
                event = event_wait_begin(run=run, node_id=node_id, spec=node["wait_for_event"])
                if event is None:
                    continue
                ended = NodeStatus.SUCCESS
                node_set_final(run=run, node_id=node_id, status=ended, result=event.payload)
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
    run = DagRun.objects.filter(id=run_id, status=RunStatus.RUNNING).first()
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
    DagRun.objects.filter(id=run.id).update(remaining_nodes=F("remaining_nodes") - 1)
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
    dag = Dag.objects.select_for_update().get(id=dag_id)
    active = DagRun.objects.filter(dag_id=dag_id, status=RunStatus.RUNNING).count()
    free = dag.max_active_runs - active
    if free <= 0:
        return
    waiting = DagRun.objects.filter(dag_id=dag_id, status=RunStatus.QUEUED).order_by("created_at")[
        :free
    ]
    for queued in waiting:
        run = run_lock(queued.id)
        if run.status != RunStatus.QUEUED:
            continue
        now = timezone.now()
        DagRun.objects.filter(id=run.id).update(status=RunStatus.RUNNING, started_at=now)
        run.status, run.started_at = RunStatus.RUNNING, now
        run_roots_start(run)


def run_roots_start(run: DagRun) -> None:
    """A run that just started: its nodes with no upstream are ready."""
    graph = graph_of_version(run.version_id)
    nodes_ready(run=run, node_ids=[n for n, node in graph.nodes.items() if not node["depends_on"]])
