"""Notification channels: create them and keep their webhook signing secrets encrypted.

The signing secret is write-only: stored Fernet-encrypted with the same keys as tenant
secrets (SECRETS_KEY, rotated by `manage.py rotate_secrets`), decrypted only by the task that
delivers a webhook, never put on the broker, in the admin or in any API response.
"""

from __future__ import annotations

import uuid
from typing import Any

from cryptography.fernet import InvalidToken
from django.db import IntegrityError, transaction

from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import ChannelKind, NotificationChannel, Tenant
from scheduler_app.services.secrets import cipher

MAX_SIGNING_SECRET_BYTES = 1024


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
    NotificationChannel.objects.filter(id=channel.id).update(
        signing_secret_ciphertext=channel.signing_secret_ciphertext
    )


def channel_signing_secret(*, channel_id: Any) -> str:
    """The plaintext signing secret of a channel ("" if it has none or is gone)."""
    try:
        channel_id = uuid.UUID(str(channel_id))
    except ValueError:  # not a channel id (a message from before secrets were encrypted)
        return ""
    ciphertext = (
        NotificationChannel.objects.filter(id=channel_id)
        .values_list("signing_secret_ciphertext", flat=True)
        .first()
    )
    return signing_secret_decrypt(ciphertext or "")


def channel_secrets_rotate() -> int:
    """Re-encrypt every channel signing secret with the first SECRETS_KEY key."""
    fernet = cipher()
    rotated = 0
    for channel_id, old in (
        NotificationChannel.objects.exclude(signing_secret_ciphertext="")
        .values_list("id", "signing_secret_ciphertext")
        .iterator(chunk_size=500)
    ):
        new = fernet.rotate(old.encode()).decode()
        NotificationChannel.objects.filter(id=channel_id, signing_secret_ciphertext=old).update(
            signing_secret_ciphertext=new
        )
        rotated += 1
    return rotated
