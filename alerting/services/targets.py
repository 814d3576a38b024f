"""Notification targets as the design document writes them, and the channels they mean.

A task's `notifications` lists targets per event. Each is a URI or a channel name:

* `slack://<slack-channel>`: the tenant's Slack channel of that name (its own incoming
  webhook) if there is one, else the tenant's Slack connection, the Slack channel named
  `slack` (a bot token posts to <slack-channel>; an incoming webhook posts where it was made
  for);
* `email://<address>`: mail to that address (nothing to configure);
* `pagerduty://<name>`: the tenant's PagerDuty channel of that name (its routing key);
* `webhook://<name>`: the tenant's webhook channel of that name (signed);
* `<name>`: the tenant's channel of that name, whatever its kind.

The same resolution checks a task when it is saved (an unknown or unconfigured target is a
400 naming it) and finds the receivers when a run is announced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email

from alerting.models import ChannelKind, NotificationChannel
from alerting.services.delivery import Target
from alerting.services.mail_budget import email_domain_allowed
from scheduler_app.errors import ValidationFailed

SLACK_CONNECTION_NAME = "slack"
SCHEMES = ("slack", "email", "pagerduty", "webhook")
_SLACK_CHANNEL = re.compile(r"^[#@]?[a-z0-9][a-z0-9._-]{0,79}$")


class TargetError(ValueError):
    pass


def _channel(
    channels: Mapping[str, NotificationChannel], name: str, kind: str, text: str
) -> NotificationChannel:
    channel = channels.get(name)
    if channel is None or channel.kind != kind:
        raise TargetError(
            f"{text!r}: this tenant has no {kind} channel named {name!r} "
            "(create it with POST /api/v1/channels)"
        )
    return channel


def resolve_target(text: str, channels: Mapping[str, NotificationChannel]) -> Target:
    """The receiver `text` names, among the tenant's `channels` (by name)."""
    scheme, separator, rest = text.partition("://")
    if not separator:
        channel = channels.get(text)
        if channel is None:
            raise TargetError(
                f"{text!r}: no channel of that name; use a channel name or "
                f"{', '.join(s + '://' for s in SCHEMES)}"
            )
        return Target(channel.kind, channel.target, str(channel.id))
    if not rest:
        raise TargetError(f"{text!r}: nothing after {scheme}://")
    if scheme == "email":
        try:
            validate_email(rest)
        except DjangoValidationError:
            raise TargetError(f"{text!r}: {rest!r} is not an email address") from None
        if not email_domain_allowed(rest):
            raise TargetError(
                f"{text!r}: the platform mails only "
                f"{', '.join(settings.ALERTS['EMAIL_ALLOWED_DOMAINS'])}"
            )
        return Target(ChannelKind.EMAIL, rest)
    if scheme == "slack":
        if not _SLACK_CHANNEL.match(rest):
            raise TargetError(f"{text!r}: {rest!r} is not a Slack channel name")
        own = channels.get(rest.lstrip("#"))
        if own is not None and own.kind == ChannelKind.SLACK:
            return Target(ChannelKind.SLACK, own.target, str(own.id), route=rest)
        connection = channels.get(SLACK_CONNECTION_NAME)
        if connection is None or connection.kind != ChannelKind.SLACK:
            raise TargetError(
                f"{text!r}: this tenant has no Slack connection (a slack channel named "
                f"{SLACK_CONNECTION_NAME!r}, or one named {rest.lstrip('#')!r})"
            )
        return Target(ChannelKind.SLACK, connection.target, str(connection.id), route=rest)
    if scheme == "pagerduty":
        channel = _channel(channels, rest, ChannelKind.PAGERDUTY, text)
        return Target(ChannelKind.PAGERDUTY, "", str(channel.id))
    if scheme == "webhook":
        channel = _channel(channels, rest, ChannelKind.WEBHOOK, text)
        return Target(ChannelKind.WEBHOOK, channel.target, str(channel.id))
    raise TargetError(f"{text!r}: unknown scheme {scheme!r}; use {', '.join(SCHEMES)}")


def _channels_named(*, tenant_id: Any, texts: Iterable[str]) -> dict[str, NotificationChannel]:
    names = set()
    for text in texts:
        _scheme, separator, rest = text.partition("://")
        names.add(rest.lstrip("#") if separator else text)
    names.add(SLACK_CONNECTION_NAME)
    return {
        channel.name: channel
        for channel in NotificationChannel.objects.filter(tenant_id=tenant_id, name__in=names)
    }


def notification_targets_check(*, tenant_id: Any, notifications: Mapping[str, list[str]]) -> None:
    """Raise ValidationFailed naming the first target of `notifications` nothing receives."""
    channels = _channels_named(
        tenant_id=tenant_id, texts=[t for texts in notifications.values() for t in texts]
    )
    cap, addresses = int(settings.ALERTS["EMAIL_MAX_RECIPIENTS"]), set()
    for event, texts in notifications.items():
        for index, text in enumerate(texts):
            field = f"notifications.{event}[{index}]"
            try:
                target = resolve_target(text, channels)
            except TargetError as error:
                raise ValidationFailed(str(error), field=field) from error
            if text.startswith("email://"):
                addresses.add(target.target.lower())
                if len(addresses) > cap:
                    raise ValidationFailed(
                        f"{text!r}: a task mails at most {cap} addresses through email:// "
                        "targets (an email channel holds as many)",
                        field=field,
                    )


def targets_for(*, tenant_id: Any, texts: list[str]) -> tuple[list[Target], list[str]]:
    """(receivers, problems): targets that stopped resolving since the task was saved (a
    channel deleted) are reported, not fatal to the others."""
    channels = _channels_named(tenant_id=tenant_id, texts=texts)
    targets, problems = [], []
    for text in dict.fromkeys(texts):
        try:
            targets.append(replace(resolve_target(text, channels), tenant_id=str(tenant_id)))
        except TargetError as error:
            problems.append(str(error))
    return targets, problems


def task_notifications_check(*, tenant_id: Any, fields: Mapping[str, Any]) -> None:
    """The check alerting adds to saving a task (scheduler_app.task_checks)."""
    if fields.get("notifications"):
        notification_targets_check(tenant_id=tenant_id, notifications=fields["notifications"])
