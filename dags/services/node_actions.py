"""An operator's hand on one node of an ended DAG run: clear it (with its upstream and/or its
downstream) so it runs again, or mark it succeeded or failed.

Airflow's "Clear" and "Mark success/failed", on this engine. A clear acts only on a run that
has ended (success, failed, partially completed, cancelled): while a run is going its engine
owns the node states, and a reset under a running execution would race the worker's finish,
so a running or queued run is refused (409) rather than half-handled. A mark acts on an ended
run, or on a running run's node that is queued or running (a stuck step done by hand): that
node ends through the engine's own completion, as if its execution had ended so, and its
execution is stopped; any other node of a running run is refused until the run has ended.

A clear resets the chosen nodes (each keeps the attempt it had, `node_attempts_keep`) and every
not-succeeded node downstream of them, then restarts the run: the reset nodes count down their
upstream as those end, so they run in dependency order and a join runs once, after its last
cleared upstream (`runs.run_nodes_reset`).

A mark sets the node's outcome by hand, as if it had ended so: its downstream is reset and
re-evaluated from it (marked succeeded: the nodes that did not succeed run; marked failed: the
DAG's failure policy and the trigger rules decide again, for every node downstream). With
nothing downstream to re-evaluate the run just ends again, with the status its nodes now say.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dags.choices import ACTIVE_RUN_STATUSES, NodeAttemptTrigger, NodeStatus, RunStatus
from dags.engine.completion import node_complete
from dags.engine.readiness import run_finish
from dags.engine.state import run_lock
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.node_attempts import node_attempts_keep
from dags.services.runs import run_nodes_reset
from dags.versions import graph_of_version
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus
from scheduler_app.errors import Conflict, NotFound, ValidationFailed
from scheduler_app.models import TaskExecution
from scheduler_app.services.audit import audit_record
from scheduler_app.services.run_signals import cancel_request

# The words the API takes for a mark, and the node status each sets.
MARK_STATES = {
    "succeeded": NodeStatus.SUCCESS,
    "success": NodeStatus.SUCCESS,
    "failed": NodeStatus.FAILED,
}
MAX_NOTE = 2000
# A running run's nodes that may be marked: their execution is waiting or running.
IN_FLIGHT = (NodeStatus.PENDING, NodeStatus.QUEUED, NodeStatus.RUNNING)


def _ended_run_lock(run: DagRun) -> DagRun:
    locked = run_lock(run.id)
    if locked.status in ACTIVE_RUN_STATUSES:
        raise Conflict(
            f"the DAG run is still {locked.status}: its nodes can be cleared or marked once it "
            "has ended (wait for it, or cancel it)",
            field="status",
        )
    return locked


def _states(locked: DagRun, node_id: str) -> dict[str, DagNodeState]:
    states = {s.node_id: s for s in DagNodeState.objects.filter(run=locked)}
    if node_id not in states:
        raise NotFound(f"node {node_id!r} is not in this DAG run")
    return states


def dag_node_clear(
    *,
    run: DagRun,
    node_id: str,
    upstream: bool = False,
    downstream: bool = False,
    note: str = "",
    actor: str = "",
) -> list[str]:
    """Clear `node_id` (and its ancestors with `upstream`, every descendant with `downstream`,
    succeeded or not) so it runs again in its run; returns the node ids reset, in order."""
    note = note.strip()[:MAX_NOTE]
    with transaction.atomic():
        locked = _ended_run_lock(run)
        states = _states(locked, node_id)
        graph = graph_of_version(locked.version_id)
        chosen = {node_id}
        if upstream:
            chosen |= graph.ancestors(node_id)
        if downstream:
            chosen |= graph.descendants({node_id})
        # What downstream of the chosen nodes did not succeed is reset too, else it would
        # never be reached again (the engine counts only `waiting` nodes).
        again = chosen | {
            n for n in graph.descendants(chosen) if states[n].status != NodeStatus.SUCCESS
        }
        run_nodes_reset(locked, states, again, trigger=NodeAttemptTrigger.CLEAR, triggered_by=actor)
        cleared = sorted(again)
        _audit(
            locked,
            "dag_node.clear",
            actor=actor,
            note=note,
            node_id=node_id,
            upstream=upstream,
            downstream=downstream,
            cleared=cleared,
            was=locked.status,
        )
    return cleared


def dag_run_clear_all(*, run: DagRun, note: str = "", actor: str = "") -> list[str]:
    """Clear every node of an ended run (its roots with everything downstream) so the whole
    run runs again in place, succeeded nodes too (a backfill's `all` reprocess); returns the
    node ids reset."""
    note = note.strip()[:MAX_NOTE]
    with transaction.atomic():
        locked = _ended_run_lock(run)
        states = {s.node_id: s for s in DagNodeState.objects.filter(run=locked)}
        every = set(states)
        run_nodes_reset(locked, states, every, trigger=NodeAttemptTrigger.CLEAR, triggered_by=actor)
        cleared = sorted(every)
        _audit(
            locked,
            "dag_run.clear",
            actor=actor,
            note=note,
            cleared=cleared,
            was=locked.status,
        )
    return cleared


def dag_node_mark(
    *, run: DagRun, node_id: str, state: str, note: str = "", actor: str = ""
) -> list[str]:
    """Mark `node_id` succeeded or failed (`note` says why); returns the downstream node ids
    reset to follow from it."""
    if state not in MARK_STATES:
        raise ValidationFailed("state must be succeeded or failed", field="state")
    state = MARK_STATES[state]
    note = note.strip()[:MAX_NOTE]
    with transaction.atomic():
        locked = run_lock(run.id)
        if locked.status == RunStatus.RUNNING:
            _mark_in_flight(locked, _states(locked, node_id)[node_id], state, note, actor)
            return []
        locked = _ended_run_lock(run)
        states = _states(locked, node_id)
        node = states[node_id]
        if node.status == state:
            raise Conflict(f"node {node_id!r} is already {node.status}", field="state")
        graph = graph_of_version(locked.version_id)
        now = timezone.now()
        numbers = node_attempts_keep(run=locked, states=[node], now=now)
        DagNodeExecution.objects.filter(run=locked, node_id=node_id).delete()
        error = "" if state == NodeStatus.SUCCESS else f"marked failed: {note}".rstrip(": ")
        DagNodeState.objects.filter(id=node.id).update(
            status=state,
            attempt_number=numbers[node_id],
            attempt_trigger=NodeAttemptTrigger.MARK,
            attempt_triggered_by=actor[:255],
            execution_id=None,
            attempts=0,
            result=None,
            error_message=error,
            completed_at=now,
            updated_at=now,
        )
        node.status = state
        below = graph.descendants({node_id})
        if state == NodeStatus.SUCCESS:
            below = {n for n in below if states[n].status != NodeStatus.SUCCESS}
        if below:
            run_nodes_reset(
                locked, states, below, trigger=NodeAttemptTrigger.MARK, triggered_by=actor
            )
        else:
            # Nothing follows from it: the run ends again with what its nodes now say.
            DagRun.platform.filter(id=locked.id).update(status=RunStatus.RUNNING, completed_at=None)
            locked.status = RunStatus.RUNNING
            run_finish(run=locked)
        _audit(
            locked,
            "dag_node.mark",
            actor=actor,
            note=note,
            node_id=node_id,
            state=state,
            reset=sorted(below),
        )
    return sorted(below)


def _mark_in_flight(locked: DagRun, node: DagNodeState, state: str, note: str, actor: str) -> None:
    """A running run's queued or running node, marked: it ends through the engine's own
    completion (its children counted, the failure policy applied, the run ended if it was the
    last), then its execution is stopped: a waiting one cancelled now, a running one killed
    after commit. Its late finish finds the node ended and is ignored (the engine counts only
    an active node)."""
    if node.status not in IN_FLIGHT or node.map_total is not None:
        raise Conflict(
            f"the DAG run is still running and node {node.node_id!r} is {node.status}: only a "
            "queued or running node (not a fan-out) can be marked now; the others once the run "
            "has ended",
            field="state",
        )
    roots = list(
        DagNodeExecution.objects.filter(run=locked, node_id=node.node_id).values_list(
            "execution_root_id", flat=True
        )
    )
    word = "succeeded" if state == NodeStatus.SUCCESS else "failed"
    error = "" if state == NodeStatus.SUCCESS else f"marked failed: {note}".rstrip(": ")
    node_complete(run=locked, node_id=node.node_id, status=state, result=None, error=error)
    now = timezone.now()
    TaskExecution.platform.filter(root_execution_id__in=roots, status__in=WAITING_STATUSES).update(
        status=ExecutionStatus.CANCELLED,
        completed_at=now,
        error_class="cancelled",
        error_message=f"its DAG node was marked {word} by hand",
        updated_at=now,
    )
    running = [
        str(execution_id)
        for execution_id in TaskExecution.platform.filter(
            root_execution_id__in=roots, status=ExecutionStatus.RUNNING
        ).values_list("id", flat=True)
    ]
    if running:
        transaction.on_commit(lambda: [cancel_request(execution_id=i) for i in running])
    _audit(
        locked,
        "dag_node.mark",
        actor=actor,
        note=note,
        node_id=node.node_id,
        state=state,
        was=node.status,
        while_running=True,
        stopped=running,
    )


def _audit(run: DagRun, verb: str, *, actor: str, note: str, **detail: object) -> None:
    """A node action's entry, on its DAG run (the audit page links it), with the reason."""
    audit_record(
        tenant=run.tenant,
        actor=actor,
        action=verb,
        object_type="dag_run",
        object_id=str(run.id),
        detail={"dag": str(run.dag_id), "dag_run_id": str(run.id), **detail},
        reason=note,
    )
