"""The flow-control fields of a task (or a DAG node's task): what they may say, and the limits
one run is under. Pure Python: no Django, so the API, the DAG definition and the claim use it
alike, and its rules are tested without a database.

    "concurrency": [{"key": "{{ parameters.customer_id }}", "max_running": 2,
                     "strategy": "queue"}],
    "pool": "warehouse", "pool_slots": 1,
    "rate_limit": [{"key": "{{ parameters.account }}", "limit": 10, "per": "minute"}]

Stored normalized on the task as one JSON object (`TaskDefinition.flow_control`, `{}` for a
task without limits, which is how the claim skips every check for it). Each field is its own
parser in `FLOW_FIELDS`, so a further field (singleton, debounce) is one more entry.

A key is a template over the run: `parameters.<path>`, `task` (the task's name), `dag` (the
DAG's name, for a node) and `tenant` (the tenant's id). Keys are the tenant's, not the task's:
two tasks whose keys render alike share the limit (a key without placeholders is a tenant-wide
named limit, e.g. one `"stripe-api"` rate limit for every task that calls Stripe). A key never
reads a secret: `{{secret:...}}` is refused when saved, and a parameter holding a secret
reference renders as `[secret]` (the reference is never resolved at the claim, and its text is
not shown in a `waiting_for` either).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from budgets.limits import DEFAULT_BUDGET, BudgetExceeded, ExpressionBudget
from budgets.templates import template_placeholders, template_render

STRATEGIES = ("queue", "cancel_in_progress", "cancel_newest", "skip")
PER_SECONDS = {"second": 1, "minute": 60, "hour": 3600}
MAX_LIMITS = 8  # per field: a run is checked against each, in one statement per kind
MAX_KEY_TEMPLATE = 255
MAX_KEY_LENGTH = 200  # longer rendered keys are kept as their SHA-256
MAX_MAX_RUNNING = 100_000
MAX_RATE = 1_000_000
MAX_POOL_SLOTS = 100_000
POOL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_PARAMETER = re.compile(r"^parameters(\.[A-Za-z0-9_-]+)+$")
KEY_NAMES = ("task", "dag", "tenant")
SECRET_MARK = "[secret]"  # noqa: S105 (what a key shows in place of a reference)
_SECRET_REFERENCE = re.compile(r"\{\{\s*secret:", re.IGNORECASE)


class FlowSpecError(ValueError):
    """A refused flow-control field; `field` names it (`concurrency[0].key`)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def key_template_check(
    template: Any, *, field: str, budget: ExpressionBudget = DEFAULT_BUDGET
) -> str:
    """The key template, or FlowSpecError naming `field`: the one check of every flow key
    (concurrency and rate limits here, singleton and debounce in `flow_trigger_spec`)."""
    if not isinstance(template, str) or not template.strip():
        raise FlowSpecError(f"{field} must be a non-empty string", field=field)
    if len(template) > MAX_KEY_TEMPLATE:
        raise FlowSpecError(f"{field} must be at most {MAX_KEY_TEMPLATE} characters", field=field)
    if _SECRET_REFERENCE.search(template):
        raise FlowSpecError(f"{field} may not read a secret", field=field)
    try:
        names = [placeholder.name for placeholder in template_placeholders(template, budget=budget)]
    except BudgetExceeded as error:
        raise FlowSpecError(f"{field}: {error.message}", field=field) from error
    for name in names:
        if name not in KEY_NAMES and not _PARAMETER.match(name):
            raise FlowSpecError(
                f"{field} names an unknown variable {{{{ {name} }}}}; use "
                "{{ parameters.<name> }}, {{ task }}, {{ dag }} or {{ tenant }}",
                field=field,
            )
    return template


def _positive_int(value: Any, *, field: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise FlowSpecError(f"{field} must be a whole number from 1 to {high}", field=field)
    return value


def _entries(value: Any, *, field: str, keys: set[str]) -> list[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        raise FlowSpecError(f"{field} must be a list of objects", field=field)
    if len(value) > MAX_LIMITS:
        raise FlowSpecError(f"{field} may hold at most {MAX_LIMITS} limits", field=field)
    for index, entry in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(entry, Mapping):
            raise FlowSpecError(f"{where} must be an object", field=where)
        unknown = sorted(set(entry) - keys)
        if unknown:
            raise FlowSpecError(f"{where} has an unknown key {unknown[0]!r}", field=where)
    return value


def _concurrency(value: Any, *, budget: ExpressionBudget) -> list[dict[str, Any]]:
    limits = []
    for index, entry in enumerate(
        _entries(value, field="concurrency", keys={"key", "max_running", "strategy"})
    ):
        where = f"concurrency[{index}]"
        strategy = entry.get("strategy", "queue")
        if strategy not in STRATEGIES:
            raise FlowSpecError(
                f"{where}.strategy must be one of {', '.join(STRATEGIES)}",
                field=f"{where}.strategy",
            )
        limits.append(
            {
                "key": key_template_check(entry.get("key"), field=f"{where}.key", budget=budget),
                "max_running": _positive_int(
                    entry.get("max_running"), field=f"{where}.max_running", high=MAX_MAX_RUNNING
                ),
                "strategy": strategy,
            }
        )
    return limits


def _rate_limit(value: Any, *, budget: ExpressionBudget) -> list[dict[str, Any]]:
    limits = []
    for index, entry in enumerate(
        _entries(value, field="rate_limit", keys={"key", "limit", "per"})
    ):
        where = f"rate_limit[{index}]"
        per = entry.get("per", "minute")
        if per not in PER_SECONDS:
            raise FlowSpecError(
                f"{where}.per must be one of {', '.join(PER_SECONDS)}", field=f"{where}.per"
            )
        limits.append(
            {
                "key": key_template_check(entry.get("key"), field=f"{where}.key", budget=budget),
                "limit": _positive_int(entry.get("limit"), field=f"{where}.limit", high=MAX_RATE),
                "per": per,
            }
        )
    return limits


def _pool(value: Any, *, budget: ExpressionBudget) -> str:
    if not isinstance(value, str) or not POOL_NAME.match(value):
        raise FlowSpecError(
            "pool must be a pool's name (letters, digits, '_', '.', '-'; at most 100)",
            field="pool",
        )
    return value


def _pool_slots(value: Any, *, budget: ExpressionBudget) -> int:
    return _positive_int(value, field="pool_slots", high=MAX_POOL_SLOTS)


FlowParser = Callable[..., Any]
# Each flow-control field and its parser (value, *, budget) -> the normalized value.
FLOW_FIELDS: dict[str, FlowParser] = {
    "concurrency": _concurrency,
    "pool": _pool,
    "pool_slots": _pool_slots,
    "rate_limit": _rate_limit,
}


def flow_spec_parse(
    spec: Mapping[str, Any], *, budget: ExpressionBudget = DEFAULT_BUDGET
) -> dict[str, Any] | None:
    """The normalized flow control of a task spec, or None when the spec names no flow field
    (an update then keeps what the task has). A field given as null or [] is removed."""
    if not any(name in spec for name in FLOW_FIELDS):
        return None
    flow: dict[str, Any] = {}
    for name, parse in FLOW_FIELDS.items():
        value = spec.get(name)
        if value is None or value == []:
            continue
        flow[name] = parse(value, budget=budget)
    if "pool_slots" in flow and "pool" not in flow:
        raise FlowSpecError("pool_slots needs a pool", field="pool_slots")
    if "pool" in flow:
        flow.setdefault("pool_slots", 1)
    return flow


@dataclass(frozen=True)
class Limit:
    """One limit a run is under. `key` is the counter's name (kind, tenant and rendered key:
    unique across tenants); `shown` is the rendered key the tenant sees in `waiting_for`.
    `maximum` is max_running, the pool's size or the rate limit; `weight` what the run takes
    of it (pool_slots; 1 otherwise); `per_seconds` a rate limit's window (0: not a rate)."""

    kind: str  # concurrency | pool | rate_limit
    key: str
    shown: str
    maximum: int
    weight: int = 1
    strategy: str = "queue"
    per_seconds: int = 0


@dataclass(frozen=True)
class RunContext:
    """What a key may read of a run."""

    tenant_id: str
    task: str
    dag: str
    parameters: Mapping[str, Any]


def _parameter(parameters: Mapping[str, Any], path: str) -> str:
    value: Any = parameters
    for part in path.split(".")[1:]:
        if not isinstance(value, Mapping) or part not in value:
            # A missing parameter keys as empty: every such run shares the key (a limit errs
            # to limiting; a trigger without an optional parameter still has one key).
            return ""
        value = value[part]
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return SECRET_MARK if _SECRET_REFERENCE.search(text) else text


def key_text(
    template: str,
    *,
    variables: Mapping[str, str],
    parameters: Mapping[str, Any],
    budget: ExpressionBudget,
    max_length: int = MAX_KEY_LENGTH,
) -> str:
    """A key template rendered over `variables` (task, dag, tenant) and `parameters`; one
    longer than `max_length` is kept as its SHA-256. Raises BudgetExceeded past the
    budget's output (the caller decides what that means for its key)."""

    def fill(name: str) -> str:
        return variables[name] if name in variables else _parameter(parameters, name)

    return _hashed_if_long(template_render(template, fill=fill, budget=budget), max_length)


def _hashed_if_long(key: str, max_length: int = MAX_KEY_LENGTH) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest() if len(key) > max_length else key


def key_render(template: str, *, run: RunContext, budget: ExpressionBudget) -> str:
    try:
        return key_text(
            template,
            variables={"task": run.task, "dag": run.dag, "tenant": run.tenant_id},
            parameters=run.parameters,
            budget=budget,
        )
    except BudgetExceeded:
        # Past the budget: one shared key (the template itself) limits them all.
        return _hashed_if_long(template)


def flow_limits(
    flow: Mapping[str, Any],
    *,
    run: RunContext,
    pool_sizes: Mapping[str, int],
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> list[Limit]:
    """The limits of one run. A pool missing from `pool_sizes` (deleted since the task was
    saved) has size 0: its runs wait until it is created again, never run unlimited."""
    limits = []
    for entry in flow.get("concurrency", ()):
        shown = key_render(entry["key"], run=run, budget=budget)
        limits.append(
            Limit(
                kind="concurrency",
                key=f"c:{run.tenant_id}:{shown}",
                shown=shown,
                maximum=entry["max_running"],
                strategy=entry["strategy"],
            )
        )
    if "pool" in flow:
        name = flow["pool"]
        limits.append(
            Limit(
                kind="pool",
                key=f"p:{run.tenant_id}:{name}",
                shown=name,
                maximum=pool_sizes.get(name, 0),
                weight=flow.get("pool_slots", 1),
            )
        )
    for entry in flow.get("rate_limit", ()):
        shown = key_render(entry["key"], run=run, budget=budget)
        limits.append(
            Limit(
                kind="rate_limit",
                key=f"r:{run.tenant_id}:{entry['per']}:{shown}",
                shown=shown,
                maximum=entry["limit"],
                per_seconds=PER_SECONDS[entry["per"]],
            )
        )
    return limits


def dag_of_node_task(description: str) -> str:
    """The DAG's name of a node's hidden task, from the description its DAG gives it
    (`dags.services.definitions`: "node 'x' of DAG 'name'"); '' for a plain task."""
    match = re.match(r"^node .* of DAG (['\"])(.*)\1$", description or "")
    return match.group(2) if match else ""
