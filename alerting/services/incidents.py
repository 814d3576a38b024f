"""Incident writes. The partial unique index on open (rule, key) is the de-duplication:
exactly one caller opens an incident, exactly one resolves it, whatever runs concurrently."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from alerting.models import AlertIncident
from scheduler_app.models import Tenant


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
    try:
        with transaction.atomic():
            return AlertIncident.objects.create(
                rule=rule,
                key=key,
                tenant=tenant,
                summary=summary,
                value=value,
                severity=severity,
                opened_at=timezone.now(),
            )
    except IntegrityError:
        return None


def incident_resolve(*, rule: str, key: str) -> AlertIncident | None:
    """Close the open incident; None when there was none (or another caller closed it)."""
    incident = AlertIncident.objects.filter(rule=rule, key=key, resolved_at__isnull=True).first()
    if incident is None:
        return None
    now = timezone.now()
    closed = AlertIncident.objects.filter(id=incident.id, resolved_at__isnull=True).update(
        resolved_at=now
    )
    if closed != 1:
        return None
    incident.resolved_at = now
    return incident


def incidents_open_keys(*, rule: str) -> set[str]:
    return set(
        AlertIncident.objects.filter(rule=rule, resolved_at__isnull=True).values_list(
            "key", flat=True
        )
    )
