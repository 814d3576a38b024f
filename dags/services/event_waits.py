"""The start of a wait_for_event node (called by the engine when the node becomes ready) and
payload matching: no engine import here, so the engine can call it (see `dags.services.events`
for the rest)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from dags.choices import EventWaitStatus, NodeStatus
from dags.models import DagNodeState, DagRun, Event, EventWait


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
    EventWait.objects.update_or_create(
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
