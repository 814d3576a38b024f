"""Evaluate a node's condition and resolve `<node>.result.<path>` against upstream results
(a JSONPath condition is evaluated by `dags.jsonpath_conditions`). Both are under the
expression budget (`budgets`): BudgetExceeded says which limit a condition went past."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgets.limits import DEFAULT_BUDGET, ExpressionBudget
from budgets.templates import dotted_path_check
from dags.jsonpath_conditions import path_condition_holds

_MISSING = object()


def resolve_path(
    path: str,
    *,
    results: Mapping[str, Any],
    statuses: Mapping[str, str],
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> Any:
    """The value at `path`, or _MISSING. `results` maps node id -> that node's result."""
    node, kind, *keys = dotted_path_check(path, budget=budget)
    if kind == "status":
        return statuses.get(node, _MISSING)
    value: Any = results.get(node, _MISSING)
    for key in keys:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isascii() and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def condition_holds(
    condition: Mapping[str, Any],
    *,
    results: Mapping[str, Any],
    statuses: Mapping[str, str],
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> bool:
    if "path" in condition:
        return path_condition_holds(condition, results=results, statuses=statuses, budget=budget)
    value = resolve_path(condition["field"], results=results, statuses=statuses, budget=budget)
    if "exists" in condition:
        return (value is not _MISSING and value is not None) == condition["exists"]
    if value is _MISSING:
        return "not_equals" in condition
    if "equals" in condition:
        return value == condition["equals"]
    if "not_equals" in condition:
        return value != condition["not_equals"]
    return value in condition["in"]


def is_missing(value: Any) -> bool:
    return value is _MISSING
