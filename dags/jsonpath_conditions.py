"""JSONPath conditions (RFC 9535): `{"path": "$.classify.result.items[0].kind", "equals": ...}`.

Pure Python, no Django. The query runs over one document holding every upstream node of
the node being decided, `{<node id>: {"result": <its result>, "status": <its status>}}`, so
`$.classify.result.type` reads what the `field` form spells `classify.result.type`, and
`$.classify.status` its status. Nodes that are not upstream are not in the document.

The query is under the expression budget (`budgets.jsonpath`): its text is checked when the
DAG is saved and again here, and its evaluation is metered (nodes visited, CPU time), so a
condition over its budget raises BudgetExceeded instead of running for minutes; the engine
fails its node with that message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonpath_rfc9535.segments import JSONPathChildSegment
from jsonpath_rfc9535.selectors import NameSelector

from budgets.jsonpath import JSONPathError, jsonpath_check, jsonpath_values
from budgets.limits import DEFAULT_BUDGET, BudgetExceeded, ExpressionBudget

__all__ = [
    "BudgetExceeded",
    "JSONPathError",
    "path_check",
    "path_condition_holds",
    "path_first_node",
]


def path_check(path: str, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> None:
    """Raises JSONPathError (where it breaks) or BudgetExceeded (which limit)."""
    jsonpath_check(path, budget=budget)


def path_first_node(path: str, *, budget: ExpressionBudget = DEFAULT_BUDGET) -> str | None:
    """The node a query starts from when its first step names one (`$.classify...` or
    `$['classify']...`), else None (a wildcard or a descendant search, which may reach any
    upstream node)."""
    segments = jsonpath_check(path, budget=budget).segments
    if not segments:
        return None
    first = segments[0]
    if not isinstance(first, JSONPathChildSegment) or len(first.selectors) != 1:
        return None
    selector = first.selectors[0]
    return selector.name if isinstance(selector, NameSelector) else None


def _document(results: Mapping[str, Any], statuses: Mapping[str, str]) -> dict[str, Any]:
    return {
        node_id: {"result": results.get(node_id), "status": statuses.get(node_id)}
        for node_id in {*results, *statuses}
    }


def path_condition_holds(
    condition: Mapping[str, Any],
    *,
    results: Mapping[str, Any],
    statuses: Mapping[str, str],
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> bool:
    """A query may select several values (wildcards, filters, `..`): `equals` and `in` hold
    when any selected value matches, `not_equals` when none does, `exists` when some selected
    value is not null. A query that selects nothing holds only for `not_equals` and
    `exists: false`, as a missing `field` does. BudgetExceeded past the budget."""
    values = jsonpath_values(condition["path"], _document(results, statuses), budget=budget)
    if "exists" in condition:
        return any(value is not None for value in values) == condition["exists"]
    if "equals" in condition:
        return any(value == condition["equals"] for value in values)
    if "not_equals" in condition:
        return all(value != condition["not_equals"] for value in values)
    return any(value in condition["in"] for value in values)
