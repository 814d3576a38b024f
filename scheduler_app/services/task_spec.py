"""Turn the API's task shape (the design document's) into model fields, validating meaning.

Types are checked by the API serializer; this module checks what only the domain knows:
that the cron parses, the zone exists, the handler type and callable are known, and that
an http handler's URL is not a literal private/loopback/metadata address (the worker's SSRF
guard would refuse it at run time anyway; names are resolved and checked then). Every
error names the field in the request's own dotted terms (`schedule.expression`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from handler_contract.base import HandlerConfigError
from handler_contract.registry import registered_names
from handler_contract.ssrf import url_target_refused
from handler_contract.validation import validate_handler_config
from scheduler_app.capabilities import capability_of_handler
from scheduler_app.choices import (
    SCHEDULE_TYPE_SPELLINGS,
    SCHEDULE_TYPES_ACCEPTED,
    Backoff,
    Catchup,
    Overlap,
    ScheduleType,
)
from scheduler_app.errors import (
    ValidationFailed,
    each_validation_error,
    validation_errors_raise,
)
from scheduler_app.flow_spec import FlowSpecError, flow_spec_parse
from scheduler_app.limits import (
    MAX_ATTEMPTS,
    MAX_DELAY_SECONDS,
    MAX_JITTER_SECONDS,
    PRIORITY_HIGHEST,
    PRIORITY_LOWEST,
    expression_budget,
    task_timeout_limit,
)
from scheduler_app.platform_tasks import platform_task_prefixes
from scheduler_app.run_key_templates import KeyTemplateError, key_template_check
from scheduler_app.services.flow_triggers import flow_trigger_task_fields
from scheduler_app.services.runbook_policy import (
    RUNBOOK_POLICY_KEYS,
    owner_field,
    runbook_policy_fields,
)
from scheduler_app.task_schedule import schedule_for
from schedules import ScheduleError
from schedules.exclusions import exclusions_leave_no_fire, exclusions_parse
from schedules.timezones import load_timezone

POLICY_KEYS = (
    "catchup",
    "overlap",
    "jitter_seconds",
    "start_at",
    "end_at",
    *RUNBOOK_POLICY_KEYS,
)


def _require_range(value: Any, *, field: str, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValidationFailed(
            f"{field} must be a number between {low:g} and {high:g}", field=field
        )


def _schedule_fields(schedule: Mapping[str, Any], *, anchor: datetime) -> dict[str, Any]:
    """Model fields of a time schedule. Every mistake of the block is reported at once
    (ValidationErrors): the type, the zone, run_at given twice and the expression or instant
    are each judged on their own (an expression is read in UTC when the zone is wrong)."""
    errors: list[ValidationFailed] = []
    schedule_type = schedule.get("type")
    if schedule_type not in SCHEDULE_TYPES_ACCEPTED:
        allowed = ", ".join(SCHEDULE_TYPES_ACCEPTED)
        errors.append(
            ValidationFailed(f"schedule.type must be one of {allowed}", field="schedule.type")
        )
        schedule_type = None
    else:
        schedule_type = SCHEDULE_TYPE_SPELLINGS.get(schedule_type, schedule_type)
    expression = schedule.get("expression") or ""
    tz_name = schedule.get("timezone") or "UTC"
    zone_known = True
    try:
        load_timezone(tz_name)
    except ScheduleError as error:
        errors.append(ValidationFailed(error.message, field=error.field))
        zone_known = False
    # `scheduled_at` is the design document's name of a one-shot's instant.
    if schedule.get("run_at") is not None and schedule.get("scheduled_at") is not None:
        errors.append(
            ValidationFailed(
                "give run_at or scheduled_at (the same instant), not both",
                field="schedule.scheduled_at",
            )
        )
    run_at = schedule.get("run_at") or schedule.get("scheduled_at")
    parsed = None
    if schedule_type is not None:
        try:
            parsed = schedule_for(
                schedule_type=schedule_type,
                expression=expression,
                timezone=tz_name if zone_known else "UTC",
                run_at=run_at,
                anchor=anchor,
            )
        except ScheduleError as error:
            errors.append(ValidationFailed(error.message, field=error.field))
    exclude: list[dict[str, str]] = []
    try:
        exclude = exclusions_parse(schedule.get("exclude"))
    except ScheduleError as error:
        errors.append(ValidationFailed(error.message, field=error.field))
    if parsed is not None and exclusions_leave_no_fire(parsed, exclude, after=anchor):
        errors.append(
            ValidationFailed(
                "the exclusions skip every fire of the schedule", field="schedule.exclude"
            )
        )
    validation_errors_raise(errors)
    assert parsed is not None and schedule_type is not None  # no error: both were set
    resolved_run_at = None
    if schedule_type == ScheduleType.ONCE:
        # The parsed schedule knows the instant (a naive time is read in the task's zone).
        resolved_run_at = parsed.next_after(datetime.min.replace(tzinfo=UTC))
    return {
        "schedule_type": schedule_type,
        "schedule_expression": expression if schedule_type in ("cron", "interval") else "",
        "timezone": tz_name,
        "run_at": resolved_run_at,
        "schedule_exclude": exclude,
    }


EVENT_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,255}$")


def schedule_fields_with_events(schedule: Mapping[str, Any], *, anchor: datetime) -> dict[str, Any]:
    """`{"type": "event", "name", "match"}` is kept as a manual schedule (nothing fires on
    time) plus `event_trigger`; every other schedule clears `event_trigger`. Every mistake
    of the block is reported at once (ValidationErrors)."""
    if schedule.get("type") != "event":
        return {**_schedule_fields(schedule, anchor=anchor), "event_trigger": None}
    errors: list[ValidationFailed] = []
    unknown = set(schedule) - {"type", "name", "match", "timezone"}
    if unknown:
        errors.append(
            ValidationFailed(
                f"an event schedule has only name and match, not {', '.join(sorted(unknown))}",
                field=f"schedule.{sorted(unknown)[0]}",
            )
        )
    name = schedule.get("name")
    if not isinstance(name, str) or not EVENT_NAME.match(name):
        errors.append(
            ValidationFailed(
                "schedule.name must be 1 to 255 letters, digits or _ . : / -",
                field="schedule.name",
            )
        )
    match = schedule.get("match") or {}
    if not isinstance(match, Mapping):
        errors.append(
            ValidationFailed("schedule.match must be a JSON object", field="schedule.match")
        )
    validation_errors_raise(errors)
    return {
        "schedule_type": ScheduleType.MANUAL,
        "schedule_expression": "",
        "timezone": "UTC",
        "run_at": None,
        "schedule_exclude": [],
        "event_trigger": {"name": name, "match": dict(match)},
    }


def schedule_block_errors(
    schedule: Mapping[str, Any], *, anchor: datetime
) -> list[ValidationFailed]:
    """Every refusal of a schedule block (empty when it is valid), for the API's serializer
    and the dashboard's form, which report them beside the other fields' in one answer."""
    try:
        schedule_fields_with_events(schedule, anchor=anchor)
    except ValidationFailed as error:
        return each_validation_error(error)
    return []


def _handler_fields(handler: Mapping[str, Any], allowed_hosts: Collection[str]) -> dict[str, Any]:
    try:
        config = validate_handler_config(
            dict(handler),
            python_registry_names=registered_names(),
            container_runtime=settings.WORKER["CONTAINER_RUNTIME"],
            celery_allowed_tasks=settings.CELERY_HANDLER_TASKS,
            platform_task_prefixes=platform_task_prefixes(),
            # The runs go to workers that offer the handler (scheduler_app.fleet.capabilities); a
            # task nobody can run yet is saved with a warning, not refused.
            require_runtime=False,
        )
    except HandlerConfigError as error:
        raise ValidationFailed(error.message, field=error.field) from error
    if config["type"] == "http":
        refused = url_target_refused(config["url"], allowed_hosts)
        if refused:
            raise ValidationFailed(
                f"{refused}; requests there are refused unless the platform operator allows "
                "the host for this tenant (tenant setting webhook_allowed_hosts)",
                field="handler.url",
            )
    return {
        "handler_type": config["type"],
        "handler_config": config,
        "capability": capability_of_handler(config),
    }


def _retry_fields(policy: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "max_attempts" in policy:
        attempts = policy["max_attempts"]
        _require_range(attempts, field="retry_policy.max_attempts", low=1, high=MAX_ATTEMPTS)
        fields["max_attempts"] = int(attempts)
    if "backoff" in policy:
        if policy["backoff"] not in Backoff.values:
            allowed = ", ".join(Backoff.values)
            raise ValidationFailed(
                f"retry_policy.backoff must be one of {allowed}", field="retry_policy.backoff"
            )
        fields["backoff"] = policy["backoff"]
    for key in ("base_delay_seconds", "max_delay_seconds"):
        if key in policy:
            _require_range(policy[key], field=f"retry_policy.{key}", low=0, high=MAX_DELAY_SECONDS)
            fields[key] = float(policy[key])
    return fields


def _aware(value: Any, *, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            value = None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValidationFailed(
            f"{field} must be an ISO 8601 date-time with a UTC offset", field=field
        )
    return value.astimezone(UTC)


def _policy_fields(policy: Mapping[str, Any], allowed_hosts: Collection[str]) -> dict[str, Any]:
    """`policy`: {catchup, overlap, jitter_seconds, start_at, end_at} and the runbook's keys
    (services.runbook_policy), every key optional."""
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise ValidationFailed(f"unknown policy key {unknown[0]!r}", field=f"policy.{unknown[0]}")
    fields: dict[str, Any] = {}
    for key, choices in (("catchup", Catchup), ("overlap", Overlap)):
        if key in policy:
            if policy[key] not in choices.values:
                allowed = ", ".join(choices.values)
                raise ValidationFailed(
                    f"policy.{key} must be one of {allowed}", field=f"policy.{key}"
                )
            fields[key] = policy[key]
    if "jitter_seconds" in policy:
        jitter = policy["jitter_seconds"]
        if isinstance(jitter, float) and jitter.is_integer():
            jitter = int(jitter)
        if isinstance(jitter, bool) or not isinstance(jitter, int):
            raise ValidationFailed(
                "policy.jitter_seconds must be a whole number", field="policy.jitter_seconds"
            )
        _require_range(jitter, field="policy.jitter_seconds", low=0, high=MAX_JITTER_SECONDS)
        fields["jitter_seconds"] = jitter
    for key in ("start_at", "end_at"):
        if key in policy:
            fields[key] = _aware(policy[key], field=f"policy.{key}")
    fields.update(runbook_policy_fields(policy, allowed_hosts=allowed_hosts))
    return fields


def _check_policy_fits(fields: Mapping[str, Any], *, anchor: datetime) -> None:
    """Window order, and a jitter smaller than the gap between fires (a larger one would
    let a jittered fire overtake the next and lose it)."""
    start_at, end_at = fields.get("start_at"), fields.get("end_at")
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise ValidationFailed("policy.end_at must be after policy.start_at", field="policy.end_at")
    jitter = fields.get("jitter_seconds") or 0
    if not jitter or fields.get("schedule_type") not in (ScheduleType.CRON, ScheduleType.INTERVAL):
        return
    schedule = schedule_for(
        schedule_type=fields["schedule_type"],
        expression=fields["schedule_expression"],
        timezone=fields["timezone"],
        run_at=None,
        anchor=anchor,
    )
    moment, fires = anchor, []
    for _ in range(6):
        moment = schedule.next_after(moment)
        if moment is None:
            break
        fires.append(moment)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(fires)]
    if gaps and jitter >= min(gaps):
        raise ValidationFailed(
            f"policy.jitter_seconds must be less than the {min(gaps):g} s between fires",
            field="policy.jitter_seconds",
        )


def task_spec_to_fields(
    spec: Mapping[str, Any],
    *,
    anchor: datetime,
    partial: bool = False,
    allowed_hosts: Collection[str] = (),
) -> dict[str, Any]:
    """Validated model fields for `spec`. With partial=True only the given keys are returned.
    `allowed_hosts`: the internal hosts the tenant's http tasks may call (the tenant's
    webhook_allowed_hosts; none by default)."""
    fields: dict[str, Any] = {}
    if "name" in spec or not partial:
        name = (spec.get("name") or "").strip()
        if not name:
            raise ValidationFailed("name is required", field="name")
        fields["name"] = name
    if "description" in spec:
        fields["description"] = spec.get("description") or ""
    if "schedule" in spec or not partial:
        schedule = spec.get("schedule")
        if not isinstance(schedule, Mapping):
            raise ValidationFailed("schedule is required", field="schedule")
        fields.update(schedule_fields_with_events(schedule, anchor=anchor))
    if "handler" in spec or not partial:
        handler = spec.get("handler")
        if not isinstance(handler, Mapping):
            raise ValidationFailed("handler is required", field="handler")
        fields.update(_handler_fields(handler, allowed_hosts))
    timeout_field, timeout = _timeout(spec)
    if timeout_field:
        _require_range(timeout, field=timeout_field, low=1, high=task_timeout_limit())
        fields["timeout_seconds"] = int(timeout)
    if "retry_policy" in spec:
        fields.update(_retry_fields(spec.get("retry_policy") or {}))
    if "priority" in spec:
        _require_range(
            spec["priority"], field="priority", low=PRIORITY_HIGHEST, high=PRIORITY_LOWEST
        )
        fields["priority"] = int(spec["priority"])
    for key, kind in (("parameters", dict), ("notifications", dict), ("tags", list)):
        if key in spec:
            value = spec[key] if spec[key] is not None else kind()
            if not isinstance(value, kind):
                raise ValidationFailed(f"{key} must be a JSON {kind.__name__}", field=key)
            fields[key] = value
    if "tags" in fields and not all(isinstance(tag, str) for tag in fields["tags"]):
        raise ValidationFailed("tags must be strings", field="tags")
    if "notifications" in fields:
        fields["notifications"] = _notifications(fields["notifications"])
    if "idempotency_key" in spec:
        template = spec["idempotency_key"] or ""
        if template:
            try:
                key_template_check(template, budget=expression_budget())
            except KeyTemplateError as error:
                raise ValidationFailed(
                    f"idempotency_key {error}", field="idempotency_key"
                ) from error
        fields["idempotency_key"] = template
    fields.update(flow_trigger_task_fields(spec))
    if "enabled" in spec:
        fields["enabled"] = bool(spec["enabled"])
    if "policy" in spec:
        policy = spec.get("policy") or {}
        if not isinstance(policy, Mapping):
            raise ValidationFailed("policy must be a JSON object", field="policy")
        fields.update(_policy_fields(policy, allowed_hosts))
    fields.update(sla_fields(spec))
    fields.update(owner_field(spec))
    fields.update(flow_fields(spec))
    return fields


def flow_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The task's flow control (concurrency keys, pool, rate limits: `flow_spec`), when the
    spec names any of it; a pool's existence in the tenant is checked when saved
    (`services.pools.pool_names_check`)."""
    try:
        flow = flow_spec_parse(spec, budget=expression_budget())
    except FlowSpecError as error:
        raise ValidationFailed(error.message, field=error.field) from error
    return {} if flow is None else {"flow_control": flow}


def _timeout(spec: Mapping[str, Any]) -> tuple[str | None, Any]:
    """(field, value) of the task's timeout: `timeout_seconds`, or the design document's
    `handler.resource_requirements.timeout_seconds`; both given must agree."""
    handler = spec.get("handler")
    resources = handler.get("resource_requirements") if isinstance(handler, Mapping) else None
    inner = resources.get("timeout_seconds") if isinstance(resources, Mapping) else None
    outer = spec.get("timeout_seconds")
    if inner is not None and outer is not None and inner != outer:
        raise ValidationFailed(
            "timeout_seconds and handler.resource_requirements.timeout_seconds differ; "
            "give the timeout once",
            field="handler.resource_requirements.timeout_seconds",
        )
    if inner is not None:
        return "handler.resource_requirements.timeout_seconds", inner
    if "timeout_seconds" in spec:
        return "timeout_seconds", outer
    return None, None


MAX_SLA_SECONDS = 30 * 86400


def sla_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`sla_seconds`: a whole number of seconds (1 s to 30 days), or null for none."""
    if "sla_seconds" not in spec:
        return {}
    value = spec["sla_seconds"]
    if value is None:
        return {"sla_seconds": None}
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLA_SECONDS:
        raise ValidationFailed(
            f"sla_seconds must be a whole number from 1 to {MAX_SLA_SECONDS}, or null",
            field="sla_seconds",
        )
    return {"sla_seconds": value}


NOTIFICATION_EVENTS = ("on_failure", "on_success", "on_dlq", "on_recovery")


def _notifications(value: Mapping[str, Any]) -> dict[str, list[str]]:
    """{"on_failure": ["channel", ...], ...}: channel names of the task's tenant."""
    clean: dict[str, list[str]] = {}
    for event, names in value.items():
        if event not in NOTIFICATION_EVENTS:
            raise ValidationFailed(
                f"unknown notification event {event!r}; use {', '.join(NOTIFICATION_EVENTS)}",
                field=f"notifications.{event}",
            )
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ValidationFailed(
                "a list of notification channel names", field=f"notifications.{event}"
            )
        clean[event] = names
    return clean


def policy_check(fields: Mapping[str, Any], *, anchor: datetime) -> None:
    """Cross-field checks on the task's final fields (after a PATCH merged them)."""
    _check_policy_fits(fields, anchor=anchor)


def task_spec_errors(
    spec: Mapping[str, Any],
    *,
    anchor: datetime,
    require: bool = True,
    allowed_hosts: Collection[str] = (),
) -> list[ValidationFailed]:
    """Every refusal `task_spec_to_fields` would make of the full `spec`, not only the first:
    each key is judged on its own by the same code (a partial spec of that one key), and the
    required ones are reported when missing (unless `require` is False: the caller reported
    them). For forms that show all mistakes in one submit."""
    errors: list[ValidationFailed] = []
    for key in ("name", "schedule", "handler") if require else ():
        if key not in spec:
            errors.append(ValidationFailed(f"{key} is required", field=key))
    for key, value in spec.items():
        try:
            task_spec_to_fields(
                {key: value}, anchor=anchor, partial=True, allowed_hosts=allowed_hosts
            )
        except ValidationFailed as error:
            errors.extend(each_validation_error(error))
    return errors
