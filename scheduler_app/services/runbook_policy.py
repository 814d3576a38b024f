"""The runbook keys of a task's (and a DAG's) `policy`, and its `owner`.

- `pause_after_failures: N`: after N consecutive failed runs (DLQ entries included) the
  runbook checks `health_check` and retries once or pauses (alerting's runbook does it).
- `health_check: {"url", "expect_status": 200, "timeout_seconds": 5}`: an http GET through
  the http handler's SSRF guard: a literal private address is refused here, a name that
  resolves to one when the check is made.
- `remaining_runs: N`: the schedule pauses itself after N more fires.
- `owner`: who the runbook tells, `user:<username>` (a member of the tenant) or the name of
  one of the tenant's notification targets (checked by the task checks registry).

Every error names the field in the request's own terms (`policy.health_check.url`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from handler_contract.base import HandlerConfigError
from handler_contract.ssrf import url_target_refused
from handler_contract.validation import validate_handler_config
from scheduler_app.errors import ValidationFailed

RUNBOOK_POLICY_KEYS = ("pause_after_failures", "health_check", "remaining_runs")
HEALTH_CHECK_KEYS = ("url", "expect_status", "timeout_seconds")
MAX_PAUSE_AFTER_FAILURES = 1000
MAX_REMAINING_RUNS = 1_000_000
MAX_HEALTH_CHECK_TIMEOUT = 30
DEFAULT_HEALTH_CHECK = {"expect_status": 200, "timeout_seconds": 5}
MAX_OWNER_LENGTH = 255


def _whole_number(value: Any, *, field: str, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(
            f"{field} must be a whole number from {low} to {high}, or null", field=field
        )
    return value


def _health_check(value: Any, *, allowed_hosts: Collection[str]) -> dict[str, Any] | None:
    field = "policy.health_check"
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationFailed(f"{field} must be a JSON object, or null", field=field)
    unknown = sorted(set(value) - set(HEALTH_CHECK_KEYS))
    if unknown:
        raise ValidationFailed(f"unknown {field} key {unknown[0]!r}", field=f"{field}.{unknown[0]}")
    if "url" not in value:
        raise ValidationFailed(f"{field}.url is required", field=f"{field}.url")
    try:
        config = validate_handler_config(
            {"type": "http", "url": value["url"]}, python_registry_names=(), container_runtime=None
        )
    except HandlerConfigError as error:
        message = error.message.split(" ", 1)[-1]
        raise ValidationFailed(f"{field}.url {message}", field=f"{field}.url") from None
    refused = url_target_refused(config["url"], allowed_hosts)
    if refused:
        raise ValidationFailed(
            f"{field}.url: {refused}; allowed only for a host the platform operator allows "
            "for this tenant (tenant setting webhook_allowed_hosts)",
            field=f"{field}.url",
        )
    check = {"url": config["url"], **DEFAULT_HEALTH_CHECK}
    if "expect_status" in value:
        check["expect_status"] = _whole_number(
            value["expect_status"], field=f"{field}.expect_status", low=100, high=599
        )
    if "timeout_seconds" in value:
        check["timeout_seconds"] = _whole_number(
            value["timeout_seconds"],
            field=f"{field}.timeout_seconds",
            low=1,
            high=MAX_HEALTH_CHECK_TIMEOUT,
        )
    return check


def runbook_policy_fields(
    policy: Mapping[str, Any], *, allowed_hosts: Collection[str] = ()
) -> dict[str, Any]:
    """Model fields for the runbook keys present in `policy` (null clears one)."""
    fields: dict[str, Any] = {}
    if "pause_after_failures" in policy:
        value = policy["pause_after_failures"]
        fields["pause_after_failures"] = (
            None
            if value is None
            else _whole_number(
                value,
                field="policy.pause_after_failures",
                low=1,
                high=MAX_PAUSE_AFTER_FAILURES,
            )
        )
    if "health_check" in policy:
        fields["health_check"] = _health_check(policy["health_check"], allowed_hosts=allowed_hosts)
    if "remaining_runs" in policy:
        value = policy["remaining_runs"]
        fields["remaining_runs"] = (
            None
            if value is None
            else _whole_number(value, field="policy.remaining_runs", low=1, high=MAX_REMAINING_RUNS)
        )
    return fields


def owner_field(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`owner`: text (its meaning is checked against the tenant by the task checks)."""
    if "owner" not in spec:
        return {}
    owner = spec["owner"] if spec["owner"] is not None else ""
    if not isinstance(owner, str) or len(owner) > MAX_OWNER_LENGTH:
        raise ValidationFailed(
            f"owner must be text of at most {MAX_OWNER_LENGTH} characters", field="owner"
        )
    return {"owner": owner.strip()}


def runbook_policy_output(definition: Any) -> dict[str, Any]:
    """The runbook keys of a task's or DAG's policy, as the API shows them."""
    return {
        "pause_after_failures": definition.pause_after_failures,
        "health_check": definition.health_check,
        "remaining_runs": definition.remaining_runs,
    }


def pause_record_output(definition: Any) -> dict[str, Any]:
    """Who paused it, when and why (all empty while it runs)."""
    paused_at = definition.paused_at
    return {
        "paused_at": paused_at.isoformat().replace("+00:00", "Z") if paused_at else None,
        "paused_by": definition.paused_by,
        "pause_note": definition.pause_note,
    }
