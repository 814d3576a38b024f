"""Reads of alerting data, scoped to the tenant (another tenant's channel is a 404)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from alerting.models import NotificationChannel
from scheduler_app.errors import NotFound
from scheduler_app.models import Tenant


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
