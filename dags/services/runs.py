"""Start, queue, cancel and re-run DAG runs."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from dags.choices import (
    ACTIVE_RUN_STATUSES,
    FAILED_NODE_STATUSES,
    NodeAttemptTrigger,
    NodeStatus,
    RunStatus,
)
from dags.engine.readiness import nodes_ready, run_roots_start, run_stop
from dags.engine.state import run_lock
from dags.models import Dag, DagNodeExecution, DagNodeState, DagRun
from dags.services.definitions import current_version
from dags.services.node_attempts import node_attempts_keep
from dags.versions import graph_of_version
from scheduler_app.errors import Conflict, NotFound
from scheduler_app.services.audit import audit_action
from scheduler_app.services.fire_traces import trigger_traceparent
from scheduler_app.services.payload_quota import payload_bytes_charge, payload_cap_check
from scheduler_app.services.secrets import secret_references_refuse

DAG_RUN_SPAN = "dag.run"
RERUNNABLE = (RunStatus.FAILED, RunStatus.PARTIALLY_COMPLETED, RunStatus.CANCELLED)


def dag_trigger(
    *,
    dag: Dag,
    parameters: Mapping[str, Any] | None = None,
    trigger: str = "manual",
    scheduled_at: datetime | None = None,
    queue_only: bool = False,
    triggered_by: str = "",
) -> DagRun | None:
    """Create a run and start it, or queue it when max_active_runs are already running.

    A scheduled fire that was already recorded (by another leader) returns None. The
    parameters are size-capped (413) and counted against the tenant's bytes quota (429,
    `scheduler_app.services.payload_quota`). `triggered_by` names who asked ("user:alice";
    the run's approval nodes refuse that user's decision).
    """
    if dag.deleted_at is not None:
        raise NotFound("DAG not found")
    secret_references_refuse(parameters=parameters)
    size = payload_cap_check(tenant_id=dag.tenant_id, value=parameters, field="parameters")
    version = current_version(dag)
    if version is None:
        raise Conflict("this DAG has no version", field="dag")
    now = timezone.now()
    graph = graph_of_version(version.id)
    run_id = uuid.uuid4()
    # The DAG run's span: its trace's root, which every node's run continues.
    traceparent = trigger_traceparent(
        name=DAG_RUN_SPAN,
        attributes={
            "scheduler.dag.id": str(dag.id),
            "scheduler.dag.run.id": str(run_id),
            "scheduler.tenant.id": str(dag.tenant_id),
            "scheduler.trigger": trigger,
            "scheduler.schedule.due_at": (scheduled_at or now).isoformat(),
        },
    )
    try:
        with transaction.atomic():
            # The DAG row lock serializes slot accounting for max_active_runs.
            locked = Dag.platform.select_for_update().get(id=dag.id)
            active = DagRun.platform.filter(dag=dag, status=RunStatus.RUNNING).count()
            fits = active < locked.max_active_runs and not queue_only
            status = RunStatus.RUNNING if fits else RunStatus.QUEUED
            run = DagRun.objects.create(
                id=run_id,
                traceparent=traceparent,
                tenant_id=dag.tenant_id,
                dag=dag,
                version=version,
                status=status,
                trigger=trigger,
                triggered_by=triggered_by[:255],
                scheduled_at=scheduled_at or now,
                parameters=dict(parameters) if parameters else None,
                remaining_nodes=len(graph.nodes),
                started_at=now if status == RunStatus.RUNNING else None,
                created_at=now,
            )
            DagNodeState.objects.bulk_create(
                [
                    DagNodeState(
                        run=run,
                        node_id=node_id,
                        remaining_upstream=len(node["depends_on"]),
                        updated_at=now,
                    )
                    for node_id, node in graph.nodes.items()
                ],
                batch_size=1000,
            )
            if status == RunStatus.RUNNING:
                run_roots_start(run)
            if trigger != "event":  # an event's runs are charged with the event
                payload_bytes_charge(tenant_id=dag.tenant_id, size=size, field="parameters")
            if trigger not in ("schedule", "backfill"):  # the backfill's own entry says it
                audit_action(
                    tenant=dag.tenant,
                    verb="dag.trigger",
                    object_type="dag",
                    object_id=dag.id,
                    after={"run": str(run.id), "status": str(status), "trigger": trigger},
                )
    except IntegrityError:
        if trigger in ("schedule", "backfill"):  # that fire time was already recorded
            return None
        raise
    return run


def dag_run_cancel(*, run: DagRun, note: str = "") -> DagRun:
    """`note`: why (kept in the audit log)."""
    with transaction.atomic():
        locked = run_lock(run.id)
        if locked.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(f"the run is already {locked.status}", field="status")
        before = str(locked.status)
        run_stop(run=locked, status=RunStatus.CANCELLED, reason="cancelled by a user")
        _audit_run(run, "dag_run.cancel", before, RunStatus.CANCELLED, reason=note)
    run.refresh_from_db()
    return run


def _audit_run(run: DagRun, verb: str, before: str, after: str, **more: Any) -> None:
    """A DAG run's entry names its DAG too (the dashboard's link needs both)."""
    audit_action(
        tenant=run.tenant,
        verb=verb,
        object_type="dag_run",
        object_id=run.id,
        before={"status": before},
        after={"status": str(after)},
        detail={"dag": str(run.dag_id)},
        **more,
    )


def dag_run_rerun(*, run: DagRun, triggered_by: str = "") -> DagRun:
    """Run again the nodes that failed (or were cancelled / upstream_failed) and everything
    downstream of them that did not succeed; succeeded nodes keep their results. Each node's
    attempt so far is kept in its history. `triggered_by` names who asked ("user:alice")."""
    with transaction.atomic():
        locked = rerunnable_run_lock(run)
        before = str(locked.status)
        states = {s.node_id: s for s in DagNodeState.objects.filter(run=locked)}
        failed = {n for n, s in states.items() if s.status in FAILED_NODE_STATUSES}
        run_nodes_rerun(
            locked, states, failed, trigger=NodeAttemptTrigger.RERUN, triggered_by=triggered_by
        )
        _audit_run(run, "dag_run.rerun", before, RunStatus.RUNNING)
    run.refresh_from_db()
    return run


def rerunnable_run_lock(run: DagRun) -> DagRun:
    locked = run_lock(run.id)
    if locked.status not in RERUNNABLE:
        raise Conflict(
            f"only a failed, partially completed or cancelled run can be re-run "
            f"(this one is {locked.status})",
            field="status",
        )
    return locked


def run_nodes_rerun(
    locked: DagRun,
    states: dict[str, DagNodeState],
    failed: set[str],
    *,
    trigger: str,
    triggered_by: str = "",
) -> set[str]:
    """Reset `failed` and their descendants that did not succeed, restart the run and
    dispatch those whose upstream is done. Each reset node that had an outcome keeps it as
    an earlier attempt (`node_attempts_keep`); the new one is numbered after it and says
    what started it. The caller holds the run's lock."""
    graph = graph_of_version(locked.version_id)
    again = failed | {
        n for n in graph.descendants(failed) if states[n].status != NodeStatus.SUCCESS
    }
    run_nodes_reset(locked, states, again, trigger=trigger, triggered_by=triggered_by)
    return again


def run_nodes_reset(
    locked: DagRun,
    states: dict[str, DagNodeState],
    again: set[str],
    *,
    trigger: str,
    triggered_by: str = "",
) -> None:
    """Reset exactly `again` for their next attempt (each keeps the one it had), restart the
    run and dispatch those whose upstream is outside `again`. A node's counters start from
    what its upstream outside `again` ended as (in `states`), so the nodes inside it count
    down as they end, in dependency order: a join runs once, after its last cleared upstream.
    A node outside `again` is not `waiting`, so the engine's counting leaves it alone. The
    caller holds the run's lock and has made `again` closed downstream (a node's not-succeeded
    descendants are in it), else they would never be reached."""
    graph = graph_of_version(locked.version_id)
    now = timezone.now()
    numbers = node_attempts_keep(run=locked, states=[states[n] for n in sorted(again)], now=now)
    # Executions from before the re-run (a cancelled run's still-running ones, old
    # shards) no longer belong to these nodes (their attempt row above still names them).
    DagNodeExecution.objects.filter(run=locked, node_id__in=again).delete()
    for node_id in again:
        deps = graph.nodes[node_id]["depends_on"]
        done = [states[d].status for d in deps if d not in again]
        DagNodeState.objects.filter(id=states[node_id].id).update(
            attempt_number=numbers[node_id],
            attempt_trigger=trigger,
            attempt_triggered_by=triggered_by[:255],
            status=NodeStatus.WAITING,
            remaining_upstream=len(deps) - len(done),
            upstream_succeeded=sum(s == NodeStatus.SUCCESS for s in done),
            upstream_failed=sum(s in FAILED_NODE_STATUSES for s in done),
            upstream_skipped=sum(s == NodeStatus.SKIPPED for s in done),
            execution_id=None,
            attempts=0,
            map_total=None,
            map_finished=0,
            result=None,
            error_message="",
            started_at=None,
            completed_at=None,
            updated_at=now,
        )
    DagRun.platform.filter(id=locked.id).update(
        status=RunStatus.RUNNING, completed_at=None, remaining_nodes=len(again)
    )
    locked.status, locked.remaining_nodes = RunStatus.RUNNING, len(again)
    ready = [n for n in again if all(d not in again for d in graph.nodes[n]["depends_on"])]
    nodes_ready(run=locked, node_ids=sorted(ready))
