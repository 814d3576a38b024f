"""The runbook's health check (`policy.health_check`): one GET through the http handler's own
code, so through the same SSRF guard as a task's request at run time: the host is resolved
when the check is made and refused (nothing is fetched) if any address it resolves to is
private, unless the tenant's `webhook_allowed_hosts` (set by the operator) names the host;
the connection is pinned to the checked address, with the check's timeout."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from handler_contract.base import BufferedLogSink, HandlerContext
from handler_contract.http import run_http


@dataclass(frozen=True)
class HealthVerdict:
    """`healthy`: the expected status came back. `status_code`: what the service answered
    (None: no answer, `reason` says why: refused by the guard, timed out, unreachable)."""

    healthy: bool
    status_code: int | None
    reason: str

    def describe(self, *, url: str, expect_status: int) -> str:
        if self.status_code is not None:
            return f"health check {url} answered {self.status_code} (expected {expect_status})"
        return f"health check {url} failed: {self.reason}"


def health_check_probe(
    *, check: Mapping[str, Any], allowed_hosts: Collection[str]
) -> HealthVerdict:
    """GET `check["url"]`; healthy when it answers `check["expect_status"]`."""
    expect_status = int(check.get("expect_status", 200))
    ctx = HandlerContext(
        execution_id="health-check",
        attempt=1,
        timeout_seconds=float(check.get("timeout_seconds", 5)),
        parameters={},
        log=BufferedLogSink(16 * 1024),
        cancel_event=threading.Event(),
    )
    config = {"url": check["url"], "method": "GET", "expected_status": [expect_status]}
    outcome = run_http(config, ctx, allowed_hosts=allowed_hosts)
    result = outcome.result or {}
    status_code = result.get("status_code") if isinstance(result, dict) else None
    if outcome.succeeded:
        return HealthVerdict(True, status_code if status_code is not None else expect_status, "")
    return HealthVerdict(
        False,
        status_code if isinstance(status_code, int) else None,
        f"{outcome.error_class}: {outcome.error_message}",
    )
