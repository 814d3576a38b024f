"""Reads of alerting data, scoped to the tenant (another tenant's channel is a 404)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import QuerySet

from alerting.models import NotificationChannel
from scheduler_app.errors import NotFound
from scheduler_app.models import Tenant

if TYPE_CHECKING:
    from alerting.services.delivery import Target


def channel_list(*, tenant: Tenant) -> QuerySet[NotificationChannel]:
    return NotificationChannel.objects.filter(tenant=tenant).order_by("name")


def channel_get(*, tenant: Tenant, channel_id: Any) -> NotificationChannel:
    try:
        wanted = channel_id if isinstance(channel_id, uuid.UUID) else uuid.UUID(str(channel_id))
    except ValueError as error:
        raise NotFound("channel not found") from error
    channel = channel_list(tenant=tenant).filter(id=wanted).first()
    if channel is None:
        raise NotFound("channel not found")
    return channel


def delivery_allowed_hosts(target: Target) -> list[str]:
    """The internal hosts a delivery to `target` may reach past the SSRF guard: the
    operator's list for the platform's own alerts, the tenant's own (set by the operator)
    for a tenant's, none for a target that says neither."""
    if target.platform:
        return list(settings.ALERTS["WEBHOOK_ALLOWED_HOSTS"])
    if target.tenant_id is None:
        return []
    hosts = Tenant.objects.filter(id=target.tenant_id).values_list(
        "webhook_allowed_hosts", flat=True
    )
    return list(hosts.first() or [])
