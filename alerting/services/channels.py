"""Notification channels: create, change, delete and test them; keep their secrets encrypted.

The signing secret (webhooks) and the credential (a Slack incoming-webhook URL or bot token,
a PagerDuty routing key) are write-only: stored Fernet-encrypted with the same keys as
tenant secrets (SECRETS_KEY, rotated by `manage.py rotate_secrets`), decrypted only by the
code that delivers, never put on the broker, in the admin or in any API response.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from cryptography.fernet import InvalidToken
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email, validate_slug
from django.db import IntegrityError, transaction

from alerting.models import ChannelKind, NotificationChannel
from alerting.selectors import delivery_allowed_hosts
from alerting.services.delivery import DeliveryResult, Target, deliver
from alerting.services.mail_budget import email_domain_allowed, mail_test_admit
from handler_contract.base import HandlerConfigError
from handler_contract.ssrf import url_target_refused
from handler_contract.validation import validate_handler_config
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.services.audit import audit_action
from scheduler_app.services.secrets import cipher

MAX_SIGNING_SECRET_BYTES = 1024
MAX_CREDENTIAL_BYTES = 2048
# What each kind takes besides name, kind and alerts (the API's and the services' rule).
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    ChannelKind.WEBHOOK: ("url", "signing_secret"),
    ChannelKind.SLACK: ("webhook_url", "bot_token"),
    ChannelKind.EMAIL: ("addresses",),
    ChannelKind.PAGERDUTY: ("routing_key",),
}


def signing_secret_encrypt(secret: str) -> str:
    if not secret:
        return ""
    if len(secret.encode()) > MAX_SIGNING_SECRET_BYTES:
        raise ValidationFailed("signing secret is longer than 1 KiB", field="signing_secret")
    return cipher().encrypt(secret.encode()).decode()


def signing_secret_decrypt(ciphertext: str) -> str:
    if not ciphertext:
        return ""
    try:
        return cipher().decrypt(ciphertext.encode()).decode()
    except InvalidToken as error:
        raise ValueError("a channel signing secret cannot be decrypted with SECRETS_KEY") from error


def _credential_encrypt(value: str, *, field: str) -> str:
    if len(value.encode()) > MAX_CREDENTIAL_BYTES:
        raise ValidationFailed(f"{field} is longer than 2 KiB", field=field)
    return cipher().encrypt(value.encode()).decode()


def channel_secrets(*, channel_id: Any) -> tuple[str, str]:
    """The plaintext (signing secret, credential) of a channel, in one read ("" for what it
    has none of, or both when it is gone or `channel_id` is not a channel id: a message from
    before secrets were encrypted)."""
    try:
        channel_id = uuid.UUID(str(channel_id))
    except ValueError:
        return "", ""
    row = (
        # A delivery names the channel by the id its message carried: platform code.
        NotificationChannel.platform.filter(id=channel_id)
        .values_list("signing_secret_ciphertext", "credential_ciphertext")
        .first()
    )
    if row is None:
        return "", ""
    return signing_secret_decrypt(row[0] or ""), signing_secret_decrypt(row[1] or "")


def _checked_url(url: Any, *, field: str, allowed_hosts: Collection[str]) -> str:
    """An http(s) URL the delivery's SSRF guard would not refuse outright, for a tenant whose
    internal hosts are `allowed_hosts` (its own list; never the platform's)."""
    try:
        config = validate_handler_config(
            {"type": "http", "url": url}, python_registry_names=(), container_runtime=None
        )
    except HandlerConfigError as error:
        raise ValidationFailed(f"{field} {error.message.split(' ', 1)[-1]}", field=field) from None
    refused = url_target_refused(config["url"], allowed_hosts)
    if refused:
        raise ValidationFailed(
            f"{field}: {refused}; allowed only for a host the platform operator allows for "
            "this tenant (tenant setting webhook_allowed_hosts)",
            field=field,
        )
    return config["url"]


def _kind_values(
    kind: str, values: dict[str, Any], *, creating: bool, tenant: Tenant
) -> dict[str, Any]:
    """Model fields from a kind's own fields; refuses fields of another kind."""
    allowed = KIND_FIELDS[kind]
    for key, value in values.items():
        if key not in allowed and value not in (None, ""):
            raise ValidationFailed(
                f"{key} is not a field of a {kind} channel; it takes {', '.join(allowed)}",
                field=key,
            )
    given = {key: values[key] for key in allowed if values.get(key) not in (None, "")}
    fields: dict[str, Any] = {}
    if kind == ChannelKind.WEBHOOK:
        if "url" in given:
            fields["target"] = _checked_url(
                given["url"], field="url", allowed_hosts=tenant.webhook_allowed_hosts
            )
        elif creating:
            raise ValidationFailed("url is required for a webhook channel", field="url")
        if "signing_secret" in values:
            fields["signing_secret_ciphertext"] = signing_secret_encrypt(
                values["signing_secret"] or ""
            )
    elif kind == ChannelKind.SLACK:
        if "webhook_url" in given and "bot_token" in given:
            raise ValidationFailed("give webhook_url or bot_token, not both", field="bot_token")
        if "webhook_url" in given:
            url = _checked_url(
                given["webhook_url"],
                field="webhook_url",
                allowed_hosts=tenant.webhook_allowed_hosts,
            )
            fields["credential_ciphertext"] = _credential_encrypt(url, field="webhook_url")
            fields["target"] = ""
        elif "bot_token" in given:
            token = str(given["bot_token"]).strip()
            if not token.startswith("xox") or any(ch.isspace() for ch in token):
                raise ValidationFailed(
                    "bot_token must be a Slack token (xoxb-...)", field="bot_token"
                )
            fields["credential_ciphertext"] = _credential_encrypt(token, field="bot_token")
            fields["target"] = ""
        elif creating:
            raise ValidationFailed(
                "a slack channel needs webhook_url (an incoming webhook) or bot_token",
                field="webhook_url",
            )
    elif kind == ChannelKind.EMAIL:
        if "addresses" in given:
            addresses = given["addresses"]
            if isinstance(addresses, str):
                addresses = [a.strip() for a in addresses.split(",") if a.strip()]
            if not isinstance(addresses, list) or not addresses:
                raise ValidationFailed("addresses must be a list of emails", field="addresses")
            cap = int(settings.ALERTS["EMAIL_MAX_RECIPIENTS"])
            if len(set(addresses)) > cap:
                raise ValidationFailed(
                    f"an email channel mails at most {cap} addresses; "
                    f"{len(set(addresses))} were given",
                    field="addresses",
                )
            for index, address in enumerate(addresses):
                try:
                    validate_email(address)
                except (DjangoValidationError, TypeError):
                    raise ValidationFailed(
                        f"{address!r} is not an email address", field=f"addresses[{index}]"
                    ) from None
                if not email_domain_allowed(address):
                    raise ValidationFailed(
                        f"{address!r}: the platform mails only "
                        f"{', '.join(settings.ALERTS['EMAIL_ALLOWED_DOMAINS'])}",
                        field=f"addresses[{index}]",
                    )
            fields["target"] = ", ".join(dict.fromkeys(addresses))
        elif creating:
            raise ValidationFailed("addresses is required for an email channel", field="addresses")
    elif kind == ChannelKind.PAGERDUTY:
        if "routing_key" in given:
            key = str(given["routing_key"]).strip()
            if not key or len(key) > 128 or any(ch.isspace() for ch in key):
                raise ValidationFailed(
                    "routing_key must be a PagerDuty integration key", field="routing_key"
                )
            fields["credential_ciphertext"] = _credential_encrypt(key, field="routing_key")
        elif creating:
            raise ValidationFailed(
                "routing_key is required for a pagerduty channel", field="routing_key"
            )
    return fields


def channel_create(
    *, tenant: Tenant, name: str, kind: str, alerts: bool = True, **values: Any
) -> NotificationChannel:
    """A channel of `kind` with that kind's fields (KIND_FIELDS)."""
    if kind not in ChannelKind.values:
        raise ValidationFailed(f"kind must be one of {', '.join(ChannelKind.values)}", field="kind")
    try:
        validate_slug(name)
    except DjangoValidationError:
        raise ValidationFailed("name must be letters, digits, '-' or '_'", field="name") from None
    fields = _kind_values(kind, values, creating=True, tenant=tenant)
    try:
        with transaction.atomic():
            channel = NotificationChannel.objects.create(
                tenant=tenant, name=name, kind=kind, alerts=alerts, **fields
            )
            _audit(channel, "channel.create", after={"name": name, "kind": kind, "alerts": alerts})
            return channel
    except IntegrityError as error:
        raise Conflict(f"a channel named {name!r} already exists", field="name") from error


def channel_update(
    *, channel: NotificationChannel, alerts: bool | None = None, **values: Any
) -> NotificationChannel:
    """Change a channel's own fields (its name and kind stay: tasks name it)."""
    fields = _kind_values(channel.kind, values, creating=False, tenant=channel.tenant)
    if alerts is not None:
        fields["alerts"] = alerts
    if fields:
        NotificationChannel.objects.filter(tenant_id=channel.tenant_id, id=channel.id).update(
            **fields
        )
        channel.refresh_from_db()
        # Names only: the values may be credentials (a webhook's URL with its token).
        _audit(channel, "channel.update", after={"changed": sorted(fields)})
    return channel


def _audit(channel: NotificationChannel, verb: str, **change: Any) -> None:
    audit_action(
        tenant=channel.tenant, verb=verb, object_type="channel", object_id=channel.id, **change
    )


def channel_delete(*, channel: NotificationChannel, note: str = "") -> None:
    """Tasks that name it are told at their next notification (the target is reported as
    unresolved in the worker's log); saving such a task again asks for a valid target."""
    if NotificationChannel.objects.filter(tenant_id=channel.tenant_id, id=channel.id).delete()[0]:
        before = {"name": channel.name, "kind": channel.kind}
        _audit(channel, "channel.delete", before=before, reason=note)


def channel_test(*, channel: NotificationChannel, route: str = "") -> DeliveryResult:
    """Send a test message now (in this process) and return the receiver's answer."""
    message = {
        "event": "test",
        "title": f"Test message for channel {channel.name}",
        "text": "The scheduler can reach this channel.",
        "tenant": str(channel.tenant_id),
        "channel": channel.name,
    }
    signing_secret, credential = channel_secrets(channel_id=channel.id)
    target = Target(
        channel.kind, channel.target, str(channel.id), route=route, tenant_id=str(channel.tenant_id)
    )
    if channel.kind == ChannelKind.EMAIL:  # counted as notices are; 429 over the rate
        target = replace(target, target=", ".join(mail_test_admit(target=target)))
    result = deliver(
        target,
        message,
        signing_secret=signing_secret,
        credential=credential,
        allowed_hosts=delivery_allowed_hosts(target),
    )
    _audit(channel, "channel.test", after={"ok": result.ok})
    return result


def notification_channel_create(
    *,
    tenant: Tenant,
    name: str,
    kind: str,
    target: str,
    signing_secret: str = "",
    alerts: bool = True,
) -> NotificationChannel:
    if kind not in ChannelKind.values:
        raise ValidationFailed(f"unknown channel kind {kind!r}", field="kind")
    try:
        with transaction.atomic():
            return NotificationChannel.objects.create(
                tenant=tenant,
                name=name,
                kind=kind,
                target=target,
                signing_secret_ciphertext=signing_secret_encrypt(signing_secret),
                alerts=alerts,
            )
    except IntegrityError as error:
        raise Conflict(f"a channel named {name!r} already exists", field="name") from error


def channel_signing_secret_set(*, channel: NotificationChannel, signing_secret: str) -> None:
    """Replace (or with "" remove) the channel's signing secret."""
    channel.signing_secret_ciphertext = signing_secret_encrypt(signing_secret)
    NotificationChannel.objects.filter(tenant_id=channel.tenant_id, id=channel.id).update(
        signing_secret_ciphertext=channel.signing_secret_ciphertext
    )


def channel_signing_secret(*, channel_id: Any) -> str:
    """The plaintext signing secret of a channel ("" if it has none or is gone)."""
    return channel_secrets(channel_id=channel_id)[0]


def channel_secrets_rotate() -> int:
    """Re-encrypt every channel signing secret and credential with the first SECRETS_KEY key."""
    fernet = cipher()
    rotated = 0
    for column in ("signing_secret_ciphertext", "credential_ciphertext"):
        for channel_id, old in (
            NotificationChannel.platform.exclude(**{column: ""})
            .values_list("id", column)
            .iterator(chunk_size=500)
        ):
            new = fernet.rotate(old.encode()).decode()
            NotificationChannel.platform.filter(id=channel_id, **{column: old}).update(
                **{column: new}
            )
            rotated += 1
    return rotated
