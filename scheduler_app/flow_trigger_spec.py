"""The trigger-side flow-control fields of a task spec: `singleton` and `debounce` (issue 29,
item 4). Pure: no Django; the service that applies them is `services/flow_triggers.py`.

    "singleton": {"key": "{{ parameters.customer_id }}"}
    "debounce": {"key": "{{ parameters.customer_id }}", "seconds": 30, "max_wait_seconds": 300}

A *singleton* task has at most one queued-or-running run per key: a further trigger of the
key answers with that run instead of making a second one. A *debounced* task collapses the
triggers of one key into one pending run, which starts once the key has been quiet for
`seconds` (the timer restarts on each trigger, as Inngest's debounce does) and at the latest
`max_wait_seconds` after the first trigger (so a steady stream of triggers cannot starve the
run); it carries the last trigger's parameters.

A key is a template over the run's parameters (`parameters.<path>`), `task` (the task's
name), `dag` (the DAG's name, "" for a task triggered on its own) and `tenant` (the tenant's
slug), under the same expression budget as every other template a tenant writes
(`budgets.templates`; the constants and error type of `run_key_templates`). A key names no
secret: a `{{secret:...}}` placeholder is an unknown variable (refused when saved), and the
parameters it reads are the ones the trigger was given, which a trigger refuses to carry
secret references in (`services.secrets.secret_references_refuse`). A template without any
placeholder is allowed here, unlike an idempotency key: "one run of this task at a time" is
the commonest singleton.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budgets.limits import DEFAULT_BUDGET, BudgetExceeded, ExpressionBudget
from budgets.templates import template_placeholders, template_render
from scheduler_app.run_key_templates import MAX_KEY_LENGTH, MAX_TEMPLATE_LENGTH, KeyTemplateError

SINGLETON = "singleton"
DEBOUNCE = "debounce"
FLOW_TRIGGER_KEYS = (SINGLETON, DEBOUNCE)
KEY_VARIABLES = ("task", "dag", "tenant")
_PARAMETER = re.compile(r"^parameters(\.[A-Za-z0-9_-]+)+$")
# A window longer than a day is a schedule, not a debounce; the cap keeps a pending row's
# life bounded (and so the rows a tenant can park).
MAX_DEBOUNCE_SECONDS = 86_400
DEFAULT_MAX_WAIT_FACTOR = 10


class FlowSpecError(ValueError):
    """A refusal naming the request's field (`debounce.seconds`)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class KeyContext:
    """What a key template may read."""

    parameters: Mapping[str, Any]
    task: str
    dag: str
    tenant: str


def flow_key_template_check(
    template: Any, *, field: str, budget: ExpressionBudget = DEFAULT_BUDGET
) -> str:
    """The template, or FlowSpecError naming `field` and what is wrong."""
    if not isinstance(template, str) or not template.strip():
        raise FlowSpecError(f"{field} must be a non-empty string", field=field)
    if len(template) > MAX_TEMPLATE_LENGTH:
        raise FlowSpecError(
            f"{field} must be at most {MAX_TEMPLATE_LENGTH} characters", field=field
        )
    try:
        names = [p.name for p in template_placeholders(template, budget=budget)]
    except BudgetExceeded as error:
        raise FlowSpecError(f"{field} {error.message}", field=field) from error
    for name in names:
        if name not in KEY_VARIABLES and not _PARAMETER.match(name):
            raise FlowSpecError(
                f"{field}: unknown variable {{{{{name}}}}}; use {{{{parameters.<name>}}}}, "
                "{{task}}, {{dag}} or {{tenant}}",
                field=field,
            )
    return template


def _whole_seconds(value: Any, *, field: str, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FlowSpecError(f"{field} must be a whole number from {low} to {high}", field=field)
    return value


def _block(value: Any, *, name: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FlowSpecError(f"{name} must be a JSON object or null", field=name)
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise FlowSpecError(
            f"{name} has only {', '.join(allowed)}, not {unknown[0]!r}",
            field=f"{name}.{unknown[0]}",
        )
    return value


def singleton_parse(value: Any, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> dict | None:
    """The stored form of `singleton` ({"key": template}), None to turn it off."""
    if value is None:
        return None
    block = _block(value, name=SINGLETON, allowed=("key",))
    key = block.get("key", "{{task}}")
    return {"key": flow_key_template_check(key, field="singleton.key", budget=budget)}


def debounce_parse(value: Any, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> dict | None:
    """The stored form of `debounce` ({"key", "seconds", "max_wait_seconds"}), None for off.
    `max_wait_seconds` defaults to ten windows (at most a day)."""
    if value is None:
        return None
    block = _block(value, name=DEBOUNCE, allowed=("key", "seconds", "max_wait_seconds"))
    key = flow_key_template_check(block.get("key", "{{task}}"), field="debounce.key", budget=budget)
    if "seconds" not in block:
        raise FlowSpecError("debounce.seconds is required", field="debounce.seconds")
    seconds = _whole_seconds(
        block["seconds"], field="debounce.seconds", low=1, high=MAX_DEBOUNCE_SECONDS
    )
    default_wait = min(MAX_DEBOUNCE_SECONDS, seconds * DEFAULT_MAX_WAIT_FACTOR)
    max_wait = _whole_seconds(
        block.get("max_wait_seconds", default_wait),
        field="debounce.max_wait_seconds",
        low=seconds,
        high=MAX_DEBOUNCE_SECONDS,
    )
    return {"key": key, "seconds": seconds, "max_wait_seconds": max_wait}


def flow_trigger_fields(
    spec: Mapping[str, Any], *, budget: ExpressionBudget = DEFAULT_BUDGET
) -> dict[str, Any]:
    """Model fields for the `singleton` and `debounce` keys `spec` gives (none given: {}).
    Raises FlowSpecError; both on one task is refused (a debounced run is already the only
    pending run of its key; a singleton on top would have two answers to one trigger)."""
    fields: dict[str, Any] = {}
    if SINGLETON in spec:
        fields[SINGLETON] = singleton_parse(spec[SINGLETON], budget=budget)
    if DEBOUNCE in spec:
        fields[DEBOUNCE] = debounce_parse(spec[DEBOUNCE], budget=budget)
    if fields.get(SINGLETON) and fields.get(DEBOUNCE):
        raise FlowSpecError("give singleton or debounce, not both", field=DEBOUNCE)
    return fields


def _parameter(parameters: Mapping[str, Any], path: str) -> str:
    value: Any = parameters
    for part in path.split(".")[1:]:
        if not isinstance(value, Mapping) or part not in value:
            # A missing parameter keys as empty: a trigger without it still has one key
            # (refusing the trigger would make an optional parameter impossible).
            return ""
        value = value[part]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def flow_key_render(
    template: str, *, context: KeyContext, budget: ExpressionBudget = DEFAULT_BUDGET
) -> str:
    """The key of one trigger. A key longer than MAX_KEY_LENGTH is kept as its SHA-256; one
    longer than the budget's output is a KeyTemplateError."""
    variables = {"task": context.task, "dag": context.dag, "tenant": context.tenant}

    def fill(name: str) -> str:
        return variables[name] if name in variables else _parameter(context.parameters, name)

    try:
        key = template_render(template, fill=fill, budget=budget)
    except BudgetExceeded as error:
        raise KeyTemplateError(error.message) from error
    if len(key) > MAX_KEY_LENGTH:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key
