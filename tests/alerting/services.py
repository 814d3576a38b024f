"""Local stand-ins for Slack and PagerDuty that check what they receive against the
services' published formats, and answer the way the services do.

* Slack Web API `chat.postMessage` (https://api.slack.com/methods/chat.postMessage): a POST
  with `Authorization: Bearer xox...`, a JSON body with `channel` and `text` and/or
  `blocks`; answers 200 `{"ok": true, "channel", "ts", "message"}`, or 200
  `{"ok": false, "error": "invalid_auth" | "channel_not_found" | "invalid_blocks" ...}`.
* Slack incoming webhooks (https://api.slack.com/messaging/webhooks): a JSON body with
  `text` (and optional `blocks`); answers 200 `ok`, or 400 `invalid_payload`.
* PagerDuty Events API v2 (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/
  and .../resolve-events/): POST /v2/enqueue with `routing_key` (32 characters),
  `event_action` trigger|acknowledge|resolve, `dedup_key` (at most 255 characters; required
  to resolve), and for a trigger a `payload` with `summary` (at most 1024 characters),
  `source` and `severity` critical|error|warning|info; answers 202
  `{"status": "success", "message": "Event processed", "dedup_key"}`, or 400
  `{"status": "invalid event", "message": "Event object is invalid", "errors": [...]}`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SLACK_BLOCK_TYPES = {"section", "context", "divider", "header", "actions", "image"}
PAGERDUTY_SEVERITIES = {"critical", "error", "warning", "info"}
PAGERDUTY_ACTIONS = {"trigger", "acknowledge", "resolve"}


def slack_message_errors(body: Any, *, needs_channel: bool) -> list[str]:
    if not isinstance(body, dict):
        return ["body is not a JSON object"]
    errors = []
    if needs_channel and not isinstance(body.get("channel"), str):
        errors.append("channel_not_found")
    if not body.get("text") and not body.get("blocks"):
        errors.append("no_text")
    if "text" in body and not isinstance(body["text"], str):
        errors.append("invalid_arguments: text")
    for block in body.get("blocks") or []:
        if not isinstance(block, dict) or block.get("type") not in SLACK_BLOCK_TYPES:
            errors.append("invalid_blocks")
        elif block["type"] == "section" and len(block.get("text", {}).get("text", "")) > 3000:
            errors.append("invalid_blocks: section text over 3000 characters")
        elif block["type"] == "actions":
            errors += _actions_errors(block)
    return errors


def _actions_errors(block: dict) -> list[str]:
    """Block Kit's actions block: 1-25 elements; a link button has plain_text text (at most
    75 characters) and an http(s) url of at most 3000 characters."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
        return ["invalid_blocks: actions need 1-25 elements"]
    errors = []
    for element in elements:
        text = element.get("text") or {}
        url = element.get("url", "")
        if element.get("type") != "button" or text.get("type") != "plain_text":
            errors.append("invalid_blocks: a button needs plain_text text")
        elif not 0 < len(text.get("text", "")) <= 75:
            errors.append("invalid_blocks: button text must be 1-75 characters")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            errors.append("invalid_blocks: a button's url must be http(s)")
        elif len(url) > 3000:
            errors.append("invalid_blocks: a button's url is over 3000 characters")
    return errors


def pagerduty_event_errors(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["body is not a JSON object"]
    errors = []
    key = body.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("'routing_key' must be a 32-character integration key")
    action = body.get("event_action")
    if action not in PAGERDUTY_ACTIONS:
        errors.append("'event_action' is invalid")
    dedup_key = body.get("dedup_key")
    if dedup_key is not None and (not isinstance(dedup_key, str) or len(dedup_key) > 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and not dedup_key:
        errors.append("'dedup_key' is required to acknowledge or resolve")
    if action == "trigger":
        payload = body.get("payload")
        if not isinstance(payload, dict):
            errors.append("'payload' is missing")
        else:
            summary = payload.get("summary")
            if not isinstance(summary, str) or not summary or len(summary) > 1024:
                errors.append("'payload.summary' must be 1-1024 characters")
            if not isinstance(payload.get("source"), str) or not payload["source"]:
                errors.append("'payload.source' is missing")
            if payload.get("severity") not in PAGERDUTY_SEVERITIES:
                errors.append("'payload.severity' is invalid")
        for link in body.get("links") or []:
            if not isinstance(link, dict) or not isinstance(link.get("href"), str):
                errors.append("'links' entries need an href")
    return errors


class ServiceReceiver:
    """One local server playing Slack (/api/chat.postMessage, /services/...) and PagerDuty
    (/v2/enqueue). Every request is kept with the errors its payload had."""

    def __init__(self, *, bot_token: str = "xoxb-test-token") -> None:
        self.requests: list[dict[str, Any]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: Any) -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                ctype = "text/plain" if isinstance(body, str) else "application/json"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                entry = {"path": self.path, "headers": dict(self.headers), "body": body}
                received.append(entry)
                if self.path == "/api/chat.postMessage":
                    errors = slack_message_errors(body, needs_channel=True)
                    if self.headers.get("Authorization") != f"Bearer {bot_token}":
                        errors.insert(0, "invalid_auth")
                    entry["errors"] = errors
                    if errors:
                        self._answer(200, {"ok": False, "error": errors[0]})
                    else:
                        self._answer(
                            200,
                            {"ok": True, "channel": body["channel"], "ts": "1.0", "message": {}},
                        )
                elif self.path.startswith("/services/"):
                    errors = slack_message_errors(body, needs_channel=False)
                    entry["errors"] = errors
                    self._answer(400 if errors else 200, "invalid_payload" if errors else "ok")
                elif self.path == "/v2/enqueue":
                    errors = pagerduty_event_errors(body)
                    entry["errors"] = errors
                    if errors:
                        self._answer(
                            400,
                            {
                                "status": "invalid event",
                                "message": "Event object is invalid",
                                "errors": errors,
                            },
                        )
                    else:
                        self._answer(
                            202,
                            {
                                "status": "success",
                                "message": "Event processed",
                                "dedup_key": body.get("dedup_key"),
                            },
                        )
                else:
                    entry["errors"] = ["unknown path"]
                    self._answer(404, "not found")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def stop(self) -> None:
        self.server.shutdown()
