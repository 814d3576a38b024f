"""Task idempotency keys (the design document's §12): a template over a run's parameters
and schedule time; a run whose key already succeeded for its task is not run again.

    "idempotency_key": "{{parameters.region}}:{{scheduled_date}}"

Placeholders: `parameters.<name>` (a dotted path into the run's parameters, the task's
merged with the trigger's), `scheduled_at` (the fire's instant, ISO 8601 UTC),
`scheduled_date` and `scheduled_time` (the fire's date and time in the task's time zone:
a daily 02:00 America/New_York run is keyed on New York's date). The key is rendered once,
for the first attempt of a fire; its retries carry the same key. Pure: no Django.

A key template is tenant input under the expression budget (`budgets.templates`), like every
path and template a tenant writes: placeholders are found in linear time, each one's path is
capped in length and parts, and the rendered key may not pass the budget's output size
before it is hashed (a parameter of 1 MiB would otherwise be copied into every key).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from budgets.limits import DEFAULT_BUDGET, BudgetExceeded, ExpressionBudget
from budgets.templates import template_placeholders, template_render

MAX_TEMPLATE_LENGTH = 255
MAX_KEY_LENGTH = 255
_PARAMETER = re.compile(r"^parameters(\.[A-Za-z0-9_-]+)+$")
TIME_NAMES = ("scheduled_at", "scheduled_date", "scheduled_time")


class KeyTemplateError(ValueError):
    pass


def key_template_check(template: Any, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> str:
    """The template, or KeyTemplateError saying what is wrong with it."""
    if not isinstance(template, str) or not template.strip():
        raise KeyTemplateError("must be a non-empty string")
    if len(template) > MAX_TEMPLATE_LENGTH:
        raise KeyTemplateError(f"must be at most {MAX_TEMPLATE_LENGTH} characters")
    try:
        names = [p.name for p in template_placeholders(template, budget=budget)]
    except BudgetExceeded as error:
        raise KeyTemplateError(error.message) from error
    if not names:
        raise KeyTemplateError(
            "names no placeholder, so every run would share one key; use "
            "{{parameters.<name>}}, {{scheduled_date}}, {{scheduled_time}} or {{scheduled_at}}"
        )
    for name in names:
        if name not in TIME_NAMES and not _PARAMETER.match(name):
            raise KeyTemplateError(
                f"unknown placeholder {{{{{name}}}}}; use {{{{parameters.<name>}}}}, "
                "{{scheduled_date}}, {{scheduled_time}} or {{scheduled_at}}"
            )
    return template


def _parameter(parameters: Mapping[str, Any], path: str) -> str:
    value: Any = parameters
    for part in path.split(".")[1:]:
        if not isinstance(value, Mapping) or part not in value:
            raise KeyTemplateError(f"the run has no parameter {path.removeprefix('parameters.')}")
        value = value[part]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def key_render(
    template: str,
    *,
    parameters: Mapping[str, Any],
    scheduled_at: datetime,
    timezone_name: str,
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> str:
    """The key of one fire. A key longer than MAX_KEY_LENGTH is kept as its SHA-256; one
    longer than the budget's output is a KeyTemplateError."""
    local = scheduled_at.astimezone(ZoneInfo(timezone_name or "UTC"))
    times = {
        "scheduled_at": scheduled_at.astimezone(ZoneInfo("UTC")).isoformat().replace("+00:00", "Z"),
        "scheduled_date": local.date().isoformat(),
        "scheduled_time": local.strftime("%H:%M:%S"),
    }

    def fill(name: str) -> str:
        return times[name] if name in times else _parameter(parameters, name)

    try:
        key = template_render(template, fill=fill, budget=budget)
    except BudgetExceeded as error:
        raise KeyTemplateError(error.message) from error
    if len(key) > MAX_KEY_LENGTH:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key
