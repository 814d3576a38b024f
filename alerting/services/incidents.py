"""Incident writes. The partial unique index on open (rule, key) is the de-duplication:
exactly one caller opens an incident, exactly one resolves it, whatever runs concurrently.

People acknowledge ("I am on it": no more announcements, still listed until resolved) and
resolve by hand (with a note); each is one conditional UPDATE and one audit entry. A
resolved incident stays resolved: a rule that fires again opens a new one."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from alerting.incident_words import rule_title
from alerting.models import AlertIncident
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.services.audit import audit_record, audit_unchanged

NOTE_MAX_CHARS = 2000


def incident_open(
    *,
    rule: str,
    key: str,
    summary: str,
    tenant: Tenant | None = None,
    value: float | None = None,
    severity: str = "warning",
) -> AlertIncident | None:
    """The new incident, or None when one is already open (nobody should be told twice)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            return AlertIncident.objects.create(
                rule=rule,
                key=key,
                tenant=tenant,
                summary=summary,
                value=value,
                severity=severity,
                opened_at=now,
                notified_at=now,
            )
    except IntegrityError:
        return None


def incident_resolve(*, rule: str, key: str) -> AlertIncident | None:
    """Close the open incident; None when there was none (or another caller closed it)."""
    incident = AlertIncident.platform.filter(rule=rule, key=key, resolved_at__isnull=True).first()
    if incident is None:
        return None
    now = timezone.now()
    closed = AlertIncident.platform.filter(id=incident.id, resolved_at__isnull=True).update(
        resolved_at=now
    )
    if closed != 1:
        return None
    incident.resolved_at = now
    return incident


def incidents_open_keys(*, rule: str) -> set[str]:
    return set(
        AlertIncident.platform.filter(rule=rule, resolved_at__isnull=True).values_list(
            "key", flat=True
        )
    )


def _words(incident: AlertIncident) -> str:
    return f"{rule_title(incident.rule)} ({incident.summary})"


def _refuse_resolved(incident: AlertIncident) -> None:
    by = f" by {incident.resolved_by}" if incident.resolved_by else " (its rule stopped firing)"
    raise Conflict(
        f"this incident was already resolved{by} at {incident.resolved_at:%Y-%m-%d %H:%M:%S} UTC",
        field="state",
    )


def incident_acknowledge(*, incident: AlertIncident, actor: str) -> AlertIncident:
    """Someone is on it: no more announcements; it stays listed until it is resolved. A second
    acknowledgement changes nothing (the first one's name stays); a resolved incident is 409."""
    now = timezone.now()
    with transaction.atomic():
        # The incident's own tenant (None: a platform incident, staff's to acknowledge).
        taken = AlertIncident.objects.filter(
            tenant_id=incident.tenant_id,
            id=incident.id,
            resolved_at__isnull=True,
            acknowledged_at__isnull=True,
        ).update(acknowledged_at=now, acknowledged_by=actor[:255])
        current = AlertIncident.objects.select_related("tenant").get(
            tenant_id=incident.tenant_id, id=incident.id
        )
        if taken != 1:
            if current.resolved_at is not None:
                _refuse_resolved(current)
            audit_unchanged()  # already acknowledged: nothing to record
            return current
        audit_record(
            tenant=current.tenant,
            actor=actor,
            action="incident.acknowledge",
            object_type="incident",
            object_id=str(current.id),
            detail={
                "summary": f"{actor} acknowledged {_words(current)}",
                "rule": current.rule,
                "key": current.key,
            },
        )
    return current


def incident_note_clean(note: Any) -> str:
    """A resolution note: text up to NOTE_MAX_CHARS (400 otherwise, before anything changes)."""
    if note is None:
        return ""
    if not isinstance(note, str):
        raise ValidationFailed("note must be text", field="note")
    note = note.strip()
    if len(note) > NOTE_MAX_CHARS:
        raise ValidationFailed(f"note is longer than {NOTE_MAX_CHARS} characters", field="note")
    return note


def incident_resolve_by_hand(
    *, incident: AlertIncident, actor: str, note: Any = ""
) -> AlertIncident:
    """Resolve it now, whether or not its rule still fires (if it does, its next evaluation
    opens a new incident, announced again). Resolving twice is 409: someone else did."""
    note = incident_note_clean(note)
    now = timezone.now()
    with transaction.atomic():
        taken = AlertIncident.objects.filter(
            tenant_id=incident.tenant_id, id=incident.id, resolved_at__isnull=True
        ).update(resolved_at=now, resolved_by=actor[:255], resolution_note=note)
        current = AlertIncident.objects.select_related("tenant").get(
            tenant_id=incident.tenant_id, id=incident.id
        )
        if taken != 1:
            _refuse_resolved(current)
        audit_record(
            tenant=current.tenant,
            actor=actor,
            action="incident.resolve",
            object_type="incident",
            object_id=str(current.id),
            detail={
                "summary": f"{actor} resolved {_words(current)}" + (f": {note}" if note else ""),
                "rule": current.rule,
                "key": current.key,
            },
            reason=note,
        )
    return current


def incidents_renotify_due(
    *, rule: str, keys: set[str], now: datetime | None = None
) -> list[AlertIncident]:
    """The open incidents of `rule` among `keys` (still firing) that nobody acknowledged and
    that were last announced RENOTIFY_SECONDS ago or more, each stamped as announced now (one
    conditional UPDATE each, so two evaluators announce it once)."""
    every = settings.ALERTS["RENOTIFY_SECONDS"]
    if every <= 0 or not keys:
        return []
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=every)
    due = AlertIncident.platform.filter(
        rule=rule, key__in=keys, resolved_at__isnull=True, acknowledged_at__isnull=True
    ).filter(Q(notified_at__lt=cutoff) | Q(notified_at__isnull=True, opened_at__lt=cutoff))
    reminded = []
    for incident in due.select_related("tenant"):
        stamped = (
            AlertIncident.platform.filter(id=incident.id, acknowledged_at__isnull=True)
            .filter(Q(notified_at__lt=cutoff) | Q(notified_at__isnull=True))
            .update(notified_at=now)
        )
        if stamped == 1:
            incident.notified_at = now
            reminded.append(incident)
    return reminded
