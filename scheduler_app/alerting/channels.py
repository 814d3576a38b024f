"""Delivering one message to one channel: signed webhook, Slack-compatible webhook, email.

Webhooks go through the worker's SSRF guard (workers.handlers.http): a channel URL that
resolves to a private or loopback address is refused unless its host is in
ALERTS["WEBHOOK_ALLOWED_HOSTS"].
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from scheduler_app.alerting.signing import signature_header
from scheduler_app.models import ChannelKind
from workers.handlers.base import BufferedLogSink, HandlerContext
from workers.handlers.http import run_http

SIGNATURE_HEADER = "X-Scheduler-Signature"
EVENT_HEADER = "X-Scheduler-Event"


@dataclass(frozen=True)
class Target:
    """A channel as delivery needs it (a saved NotificationChannel, or the operators' one).
    It names the channel instead of carrying its signing secret: the secret is decrypted by
    the delivering task only, so it never travels through the broker."""

    kind: str
    target: str
    channel_id: str | None = None


@dataclass(frozen=True)
class DeliveryResult:
    ok: bool
    detail: str
    transient: bool = False


def signature(secret: str, body: bytes) -> str:
    """`t=<unix time>,v1=<HMAC-SHA256 of "<t>." + body>` (scheduler_app/alerting/signing.py)."""
    return signature_header(secret, body)


def _post_json(url: str, payload: dict[str, Any], headers: dict[str, str]) -> DeliveryResult:
    ctx = HandlerContext(
        execution_id="notification",
        attempt=1,
        timeout_seconds=settings.ALERTS["WEBHOOK_TIMEOUT_SECONDS"],
        parameters={},
        log=BufferedLogSink(64 * 1024),
        cancel_event=threading.Event(),
    )
    config = {"url": url, "method": "POST", "body": payload, "headers": headers}
    outcome = run_http(config, ctx, allowed_hosts=settings.ALERTS["WEBHOOK_ALLOWED_HOSTS"])
    if outcome.succeeded:
        return DeliveryResult(True, "delivered")
    return DeliveryResult(
        False, f"{outcome.error_class}: {outcome.error_message}", transient=outcome.transient
    )


def deliver(target: Target, message: dict[str, Any], *, signing_secret: str = "") -> DeliveryResult:
    if target.kind == ChannelKind.WEBHOOK:
        # run_http sends json.dumps(body) exactly; the signature covers those bytes and the
        # time of signing.
        body = json.dumps(message).encode("utf-8")
        headers = {EVENT_HEADER: str(message.get("event", ""))}
        if signing_secret:
            headers[SIGNATURE_HEADER] = signature(signing_secret, body)
        return _post_json(target.target, message, headers)
    if target.kind == ChannelKind.SLACK:
        text = f"*{message['title']}*\n{message.get('text', '')}"
        return _post_json(target.target, {"text": text}, {})
    if target.kind == ChannelKind.EMAIL:
        recipients = [a.strip() for a in target.target.split(",") if a.strip()]
        send_mail(
            subject=message["title"],
            message=f"{message.get('text', '')}\n\n{message.get('url', '')}".strip(),
            from_email=settings.ALERTS["FROM_EMAIL"],
            recipient_list=recipients,
        )
        return DeliveryResult(True, f"mailed {len(recipients)}")
    return DeliveryResult(False, f"unknown channel kind {target.kind!r}")
