"""What `schedctl describe` says first about a task or a DAG: whether it runs, and if paused
who paused it, when and why; its owner, the failures in a row and the runbook policy
(pause_after_failures, health_check, remaining_runs)."""

from __future__ import annotations

from typing import Any

from schedctl.output import short_time


def pauser(paused_by: str) -> str:
    """`user:ana` -> ana; the runbook and the remaining-runs count as what they are."""
    if paused_by == "runbook":
        return "the runbook"
    if paused_by == "remaining_runs":
        return "policy.remaining_runs"
    kind, _, name = paused_by.partition(":")
    if kind == "user" and name:
        return name
    if kind == "apikey" and name:
        return f"API key {name}"
    return paused_by or "someone"


def state_line(data: dict[str, Any]) -> str:
    if not data.get("paused"):
        return "active" if data.get("enabled", True) else "disabled"
    if not data.get("paused_at"):
        return "paused"
    line = f"paused by {pauser(data.get('paused_by') or '')} at {short_time(data['paused_at'])} UTC"
    note = data.get("pause_note")
    return f"{line}: {note}" if note else line


def runbook_lines(data: dict[str, Any]) -> list[str]:
    policy = data.get("policy") or {}
    lines = [f"owner: {data.get('owner') or '(none)'}"]
    failures = data.get("consecutive_failures") or 0
    after = policy.get("pause_after_failures")
    lines.append(
        f"consecutive failures: {failures}"
        + (f" (the runbook acts at {after})" if after else " (no pause_after_failures)")
    )
    check = policy.get("health_check")
    if check:
        lines.append(
            f"health check: GET {check.get('url')} expects {check.get('expect_status')} "
            f"within {check.get('timeout_seconds')} s"
        )
    remaining = policy.get("remaining_runs")
    lines.append(
        "remaining runs: unlimited"
        if remaining is None
        else f"remaining runs: {remaining} (then the schedule pauses itself)"
    )
    return lines


def summary(kind: str, data: dict[str, Any]) -> str:
    """The lines describe prints above the full definition."""
    lines = [f"{kind} {data.get('name')}: {state_line(data)}"]
    lines += [f"  {line}" for line in runbook_lines(data)]
    return "\n".join(lines)
