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
slug). It is checked and rendered as every flow key is (`flow_spec.key_template_check` and
`flow_spec.key_text`: one validator, one error type, under the expression budget): a key names
no secret (`{{secret:...}}` is refused when saved), and the parameters it reads are the ones
the trigger was given, which a trigger refuses to carry secret references in
(`services.secrets.secret_references_refuse`). A template without any placeholder is allowed
here, unlike an idempotency key: "one run of this task at a time" is the commonest singleton.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budgets.limits import DEFAULT_BUDGET, BudgetExceeded, ExpressionBudget
from scheduler_app.flow_spec import FlowSpecError, key_template_check, key_text
from scheduler_app.run_key_templates import MAX_KEY_LENGTH, KeyTemplateError

__all__ = [
    "DEBOUNCE",
    "SINGLETON",
    "KeyContext",
    "debounce_parse",
    "flow_key_render",
    "flow_trigger_fields",
    "singleton_parse",
]

SINGLETON = "singleton"
DEBOUNCE = "debounce"
FLOW_TRIGGER_KEYS = (SINGLETON, DEBOUNCE)
# A window longer than a day is a schedule, not a debounce; the cap keeps a pending row's
# life bounded (and so the rows a tenant can park).
MAX_DEBOUNCE_SECONDS = 86_400
DEFAULT_MAX_WAIT_FACTOR = 10


@dataclass(frozen=True)
class KeyContext:
    """What a key template may read."""

    parameters: Mapping[str, Any]
    task: str
    dag: str
    tenant: str


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
    return {"key": key_template_check(key, field="singleton.key", budget=budget)}


def debounce_parse(value: Any, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> dict | None:
    """The stored form of `debounce` ({"key", "seconds", "max_wait_seconds"}), None for off.
    `max_wait_seconds` defaults to ten windows (at most a day)."""
    if value is None:
        return None
    block = _block(value, name=DEBOUNCE, allowed=("key", "seconds", "max_wait_seconds"))
    key = key_template_check(block.get("key", "{{task}}"), field="debounce.key", budget=budget)
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


def flow_key_render(
    template: str, *, context: KeyContext, budget: ExpressionBudget = DEFAULT_BUDGET
) -> str:
    """The key of one trigger. A key longer than MAX_KEY_LENGTH is kept as its SHA-256; one
    longer than the budget's output is a KeyTemplateError (the trigger is refused)."""
    try:
        return key_text(
            template,
            variables={"task": context.task, "dag": context.dag, "tenant": context.tenant},
            parameters=context.parameters,
            budget=budget,
            max_length=MAX_KEY_LENGTH,
        )
    except BudgetExceeded as error:
        raise KeyTemplateError(error.message) from error
