"""Events and the DAG nodes that wait for them.

A `wait_for_event` node that becomes ready does not dispatch anything: it goes to
`waiting_for_event` and an `EventWait` row records what it waits for (no worker slot is
held; nothing polls). `event_post` records an event and, in the same transaction, ends every
open wait of the tenant with that name whose `match` is a subset of the payload and whose
run started before the event: the node succeeds with the payload as its result, and the run
moves on as for any finished node (downstream conditions and handlers see the payload as its
result). The leader's housekeeping ends waits past their deadline as `timed_out`
(`event_waits_expire`): the DAG's failure policy applies as to any failed node. An event
posted before the run started does not count; one posted since, even while the node still
waited for its upstream, releases it the moment it becomes ready (`event_wait_begin`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dags.choices import EventWaitStatus, NodeStatus, RunStatus
from dags.engine.completion import node_complete
from dags.engine.readiness import payload_matches
from dags.engine.state import run_lock
from dags.models import Dag, DagNodeState, Event, EventWait
from dags.services.runs import dag_trigger
from dags.spec import EVENT_NAME
from scheduler_app.choices import Trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services.audit import audit_action, audit_cascade
from scheduler_app.services.payload_quota import payload_bytes_charge, payload_cap_check
from scheduler_app.services.task_definitions import task_trigger

logger = logging.getLogger(__name__)

PRUNE_BATCH = 5000


@dataclass
class Posted:
    event: Event
    released: list[EventWait] = field(default_factory=list)  # waits it ended
    started: list[dict[str, str]] = field(default_factory=list)  # runs its schedules started


def event_post(*, tenant: Tenant, name: Any, payload: Any) -> Posted:
    """Record an event, release the waits it matches and start a run of every task and DAG
    whose event schedule it matches (with the payload as the run's parameters). The payload
    is size-capped (413) and counted against the tenant's bytes quota (429), see
    `scheduler_app.services.payload_quota`."""
    if not isinstance(name, str) or not EVENT_NAME.match(name):
        raise ValidationFailed("name must be 1 to 255 letters, digits or _ . : / -", field="name")
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise ValidationFailed("payload must be a JSON object", field="payload")
    size = payload_cap_check(tenant_id=tenant.id, value=payload, field="payload")
    with transaction.atomic():
        event = Event.objects.create(tenant=tenant, name=name, payload=dict(payload))
        with audit_cascade():  # the runs it starts are its consequences: its entry lists them
            started = _scheduled_runs_start(tenant=tenant, event=event)
        posted = Posted(event=event, started=started)
        released = posted.released
        open_waits = EventWait.objects.filter(
            tenant=tenant, name=name, status=EventWaitStatus.WAITING, since__lte=event.created_at
        ).order_by("id")
        for wait in open_waits:
            if payload_matches(wait.match, event.payload) and _wait_end(
                wait, status=NodeStatus.SUCCESS, result=event.payload, event=event
            ):
                released.append(wait)
        # Last (payload_quota's rule): the payload is stored once for the event and once as
        # the parameters of each run it started (their triggers do not charge it again).
        payload_bytes_charge(
            tenant_id=tenant.id, size=size * (1 + len(posted.started)), field="payload"
        )
        audit_action(
            tenant=tenant,
            verb="event.create",
            object_type="event",
            object_id=event.id,
            after={"name": name, "started": len(started), "released": len(released)},
        )
    return posted


def _scheduled_runs_start(*, tenant: Tenant, event: Event) -> list[dict[str, str]]:
    """Tasks and DAGs with `"schedule": {"type": "event", ...}` that this event matches: a
    run each (trigger `event`; a task's doorbell rings after commit)."""
    started: list[dict[str, str]] = []
    for task in _listening(TaskDefinition, tenant=tenant, event=event):
        execution = task_trigger(task=task, parameters=event.payload, trigger=Trigger.EVENT)
        started.append({"task_id": str(task.id), "execution_id": str(execution.id)})
    for dag in _listening(Dag, tenant=tenant, event=event):
        run = dag_trigger(dag=dag, parameters=event.payload, trigger=Trigger.EVENT)
        started.append({"dag_id": str(dag.id), "dag_run_id": str(run.id)})
    return started


def _listening(model, *, tenant: Tenant, event: Event) -> list:
    """The live tasks or DAGs (`model`) of the tenant whose event schedule this event matches."""
    candidates = model.objects.filter(
        tenant=tenant,
        event_trigger__name=event.name,
        enabled=True,
        paused=False,
        deleted_at__isnull=True,
    ).order_by("name")
    return [
        item
        for item in candidates
        if payload_matches(item.event_trigger.get("match") or {}, event.payload)
    ]


def _wait_end(
    wait: EventWait, *, status: str, result: Any, event: Event | None = None, error: str = ""
) -> bool:
    """End one wait and its node (locking its run first, as every change of a run does)."""
    run = run_lock(wait.run_id)
    now = timezone.now()
    still_waiting = DagNodeState.objects.filter(
        run=run, node_id=wait.node_id, status=NodeStatus.WAITING_FOR_EVENT
    ).exists()
    if run.status != RunStatus.RUNNING or not still_waiting:
        EventWait.platform.filter(id=wait.id, status=EventWaitStatus.WAITING).update(
            status=EventWaitStatus.CANCELLED, resolved_at=now
        )
        return False
    ended = EventWait.platform.filter(id=wait.id, status=EventWaitStatus.WAITING).update(
        status=EventWaitStatus.RECEIVED if event else EventWaitStatus.TIMED_OUT,
        event_id=event.id if event else None,
        resolved_at=now,
    )
    if ended != 1:
        return False
    node_complete(run=run, node_id=wait.node_id, status=status, result=result, error=error)
    return True


def event_waits_expire(*, now: datetime | None = None, limit: int = 500) -> int:
    """Waits past their deadline end `timed_out` (the leader's housekeeping)."""
    now = now or timezone.now()
    expired = 0
    due = EventWait.platform.filter(status=EventWaitStatus.WAITING, deadline__lte=now).order_by(
        "deadline"
    )[:limit]
    for wait in due:
        with transaction.atomic():
            seconds = int((wait.deadline - wait.started_at).total_seconds())
            expired += _wait_end(
                wait,
                status=NodeStatus.TIMED_OUT,
                result=None,
                error=f"no event {wait.name!r} matching {wait.match} within {seconds} s",
            )
    return expired


def events_prune(*, now: datetime | None = None) -> int:
    """Delete events older than EVENTS_RETENTION_DAYS, a batch at a time."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.EVENTS_RETENTION_DAYS)
    old = list(
        Event.platform.filter(created_at__lt=cutoff).values_list("id", flat=True)[:PRUNE_BATCH]
    )
    if not old:
        return 0
    deleted, _ = Event.platform.filter(id__in=old).delete()
    return deleted
