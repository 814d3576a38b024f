"""Reads of events and event waits, tenant-scoped."""

from __future__ import annotations

from django.db.models import QuerySet

from dags.models import DagRun, Event, EventWait
from scheduler_app.models import Tenant


def event_list(*, tenant: Tenant, name: str | None = None) -> QuerySet[Event]:
    queryset = Event.objects.filter(tenant=tenant)
    if name:
        queryset = queryset.filter(name=name)
    return queryset.order_by("-created_at")


def events_by_id(*, tenant_id, event_ids) -> dict:
    return {
        event.id: event for event in Event.objects.filter(tenant_id=tenant_id, id__in=event_ids)
    }


def event_waits_of_run(*, run: DagRun) -> list[EventWait]:
    """The run is already the tenant's (the caller got it from a tenant-scoped selector)."""
    return list(EventWait.objects.filter(tenant_id=run.tenant_id, run=run).order_by("started_at"))
