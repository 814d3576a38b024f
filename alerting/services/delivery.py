"""Delivering one message to one channel: signed webhook, Slack (incoming webhook or bot
token), PagerDuty Events API v2, email.

Every HTTP delivery goes through the http handler's SSRF guard (handler_contract.ssrf): a URL that
resolves to a private or loopback address is refused unless its host is in the allow-list the
caller gives (`alerting.selectors.delivery_allowed_hosts`: the operator's list for the
platform's own alerts, the tenant's own list for a tenant's channels).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from alerting.models import ChannelKind
from alerting.services.signing import signature_header
from handler_contract.http import post_json

SIGNATURE_HEADER = "X-Scheduler-Signature"
EVENT_HEADER = "X-Scheduler-Event"
# The longest URL a Slack button takes (Block Kit's button element).
SLACK_URL_MAX = 3000
# A section block's text holds 3000 characters; a message holds 50 blocks (a few are kept for
# the run's link and the runbook).
SLACK_SECTION_MAX = 3000
SLACK_MAX_SECTIONS = 45


@dataclass(frozen=True)
class Target:
    """A channel as delivery needs it (a saved NotificationChannel, or the operators' one).
    It names the channel instead of carrying its signing secret: the secret is decrypted by
    the delivering task only, so it never travels through the broker."""

    kind: str
    target: str
    channel_id: str | None = None
    # Where inside the service: the Slack channel of a `slack://<channel>` target.
    route: str = ""
    # Whose notification this is: a tenant's (its internal hosts, its mail budget), or the
    # platform's own alerts (`platform`, the operators' channels). Neither: no internal host.
    tenant_id: str | None = None
    platform: bool = False


@dataclass(frozen=True)
class DeliveryResult:
    ok: bool
    detail: str
    transient: bool = False


def signature(secret: str, body: bytes) -> str:
    """`t=<unix time>,v1=<HMAC-SHA256 of "<t>." + body>` (alerting/services/signing.py)."""
    return signature_header(secret, body)


def _answer(result: dict[str, Any] | None) -> str:
    """The receiver's answer, short: what `POST /api/v1/channels/{id}/test` reports."""
    if not result:
        return ""
    if set(result) <= {"status_code", "body", "body_truncated"}:
        return f"HTTP {result.get('status_code')} {str(result.get('body', ''))[:200]}".strip()
    return json.dumps(result)[:300]


def _post_json(
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    allowed_hosts: Collection[str],
    traceparent: str = "",
) -> DeliveryResult:
    if traceparent:
        headers = {**headers, "traceparent": traceparent}
    outcome = post_json(
        url,
        payload,
        headers=headers,
        timeout_seconds=settings.ALERTS["WEBHOOK_TIMEOUT_SECONDS"],
        allowed_hosts=allowed_hosts,
    )
    if outcome.succeeded:
        result = outcome.result or {}
        # Slack's Web API answers 200 with {"ok": false, "error": ...} when it refuses.
        if result.get("ok") is False:
            return DeliveryResult(False, f"refused: {_answer(result)}")
        answer = _answer(result)
        return DeliveryResult(
            True, f"delivered; the receiver answered {answer}" if answer else "delivered"
        )
    return DeliveryResult(
        False, f"{outcome.error_class}: {outcome.error_message}", transient=outcome.transient
    )


def _operator_hosts() -> list[str]:
    """For the endpoints the operator configures (SLACK_API_URL, PAGERDUTY_EVENTS_URL), not
    the tenant: the operator's list, whoever's message it carries."""
    return list(settings.ALERTS["WEBHOOK_ALLOWED_HOSTS"])


def slack_sections(text: str) -> list[str]:
    """`text` cut into Slack sections (3000 characters each at most) between lines, so a
    line (an approver's signed link) is never cut in two; at most SLACK_MAX_SECTIONS of them,
    the rest left to the notification's full `text`."""
    sections: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > SLACK_SECTION_MAX:  # one line longer than a section: cut it
            if current:
                sections.append(current)
                current = ""
            sections.append(line[:SLACK_SECTION_MAX])
            line = line[SLACK_SECTION_MAX:]
        joined = f"{current}\n{line}" if current else line
        if len(joined) > SLACK_SECTION_MAX:
            sections.append(current)
            joined = line
        current = joined
    if current or not sections:
        sections.append(current)
    return sections[:SLACK_MAX_SECTIONS]


def _slack(
    target: Target, message: dict[str, Any], credential: str, allowed_hosts: Collection[str]
) -> DeliveryResult:
    """Slack's message format: `text` (mrkdwn) as the fallback and the notification, with
    `blocks` for the layout. A bot token posts to the target's Slack channel through
    chat.postMessage; an incoming webhook posts where it was made for."""
    text = f"*{message['title']}*\n{message.get('text', '')}"
    payload: dict[str, Any] = {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": part}}
            for part in slack_sections(text)
        ],
    }
    if message.get("url"):
        payload["blocks"].append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{message['url']}>"}]}
        )
    runbook = message.get("runbook_url") or ""
    # Slack refuses a button whose URL is not http(s) (a runbook of the local build is a
    # file:// URL): the message would not be posted at all, so such a link goes as text.
    if runbook.startswith(("http://", "https://")) and len(runbook) <= SLACK_URL_MAX:
        payload["blocks"].append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Runbook"},
                        "url": runbook,
                        "action_id": "runbook",
                    }
                ],
            }
        )
    elif runbook:
        payload["blocks"].append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"Runbook: {runbook}"}]}
        )
    if credential and not credential.startswith(("http://", "https://")):
        if not target.route:
            return DeliveryResult(False, "a Slack bot token needs slack://<channel>")
        payload["channel"] = target.route
        url = settings.ALERTS["SLACK_API_URL"].rstrip("/") + "/chat.postMessage"
        headers = {"Authorization": f"Bearer {credential}"}
        return _post_json(url, payload, headers, _operator_hosts())
    url = credential or target.target
    if not url:
        return DeliveryResult(False, "the Slack channel has no webhook URL or bot token")
    return _post_json(url, payload, {}, allowed_hosts)


RESOLVING_EVENTS = ("resolved", "recovery", "success", "alert_resolved", "test_resolve")


def pagerduty_event(message: dict[str, Any], routing_key: str) -> dict[str, Any]:
    """An Events API v2 event: trigger on a failure, a dead letter or an alert; resolve on
    recovery. One dedup key per task, so a task's failures are one PagerDuty incident."""
    action = "resolve" if message.get("event") in RESOLVING_EVENTS else "trigger"
    if message.get("task_id"):
        dedup_key = f"scheduler:task:{message['task_id']}"
    else:
        dedup_key = f"scheduler:{message.get('rule', 'alert')}:{message.get('key', '')}"
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": action,
        "dedup_key": dedup_key[:255],
    }
    if action == "trigger":
        severity = "critical" if message.get("event") == "dead_letter" else "error"
        if message.get("severity") in ("critical", "error", "warning", "info"):
            severity = message["severity"]
        event["payload"] = {
            "summary": f"{message['title']}: {message.get('text', '')}"[:1024],
            "source": settings.ALERTS["BASE_URL"],
            "severity": severity,
            "component": message.get("task") or message.get("rule") or "scheduler",
            "group": message.get("tenant") or "",
            "class": message.get("event", ""),
            "custom_details": {
                k: v for k, v in message.items() if k not in ("title", "text") and v is not None
            },
        }
        event["client"] = "Scheduler"
        links = []
        if message.get("url"):
            event["client_url"] = message["url"]
            links.append({"href": message["url"], "text": "Open in the scheduler"})
        if message.get("runbook_url"):
            links.append({"href": message["runbook_url"], "text": "Runbook"})
        if links:
            event["links"] = links
    return event


def email_body(message: dict[str, Any]) -> str:
    """The text, then the links: where to see it, and what to do (the runbook)."""
    lines = [message.get("text", "")]
    if message.get("url"):
        lines.append(message["url"])
    if message.get("runbook_url"):
        lines.append(f"Runbook: {message['runbook_url']}")
    return "\n\n".join(line for line in lines if line).strip()


def deliver(
    target: Target,
    message: dict[str, Any],
    *,
    signing_secret: str = "",
    credential: str = "",
    allowed_hosts: Collection[str] = (),
) -> DeliveryResult:
    """`allowed_hosts`: the internal hosts a URL of the target's own (a webhook's, a Slack
    incoming webhook's) may reach, see the module's note; the endpoints the operator
    configures are judged by the operator's list. A run's message may carry its trace
    context (`traceparent`): a webhook sends it as the W3C header, outside the signed body."""
    traceparent = str(message.get("traceparent") or "")
    if traceparent:
        message = {key: value for key, value in message.items() if key != "traceparent"}
    if target.kind == ChannelKind.WEBHOOK:
        # post_json sends json.dumps(body) exactly; the signature covers those bytes and the
        # time of signing.
        body = json.dumps(message).encode("utf-8")
        headers = {EVENT_HEADER: str(message.get("event", ""))}
        if signing_secret:
            headers[SIGNATURE_HEADER] = signature(signing_secret, body)
        return _post_json(target.target, message, headers, allowed_hosts, traceparent)
    if target.kind == ChannelKind.SLACK:
        return _slack(target, message, credential, allowed_hosts)
    if target.kind == ChannelKind.PAGERDUTY:
        if not credential:
            return DeliveryResult(False, "the PagerDuty channel has no routing key")
        url = settings.ALERTS["PAGERDUTY_EVENTS_URL"]
        return _post_json(url, pagerduty_event(message, credential), {}, _operator_hosts())
    if target.kind == ChannelKind.EMAIL:
        recipients = [a.strip() for a in target.target.split(",") if a.strip()]
        send_mail(
            subject=message["title"],
            message=email_body(message),
            from_email=settings.ALERTS["FROM_EMAIL"],
            recipient_list=recipients,
        )
        return DeliveryResult(True, f"mailed {len(recipients)}")
    return DeliveryResult(False, f"unknown channel kind {target.kind!r}")
