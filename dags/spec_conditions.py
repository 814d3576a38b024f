"""A node's `condition` and `map_over` in a DAG definition (pure Python: no Django).

Both are tenant-written paths, under the expression budget (`budgets`): a JSONPath query must
parse (RFC 9535) and stay within the budget's length, segments and single descendant segment;
a `field` path within its length and parts. A refusal names the node and the field
(`tasks[3].condition.path (task 'route'): the query has 5 descendant segments ...`). The same
checks run again when the condition is evaluated, for definitions stored before them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgets.limits import BudgetExceeded, ExpressionBudget
from budgets.templates import dotted_path_check
from dags.jsonpath_conditions import JSONPathError, path_check, path_first_node
from dags.spec_errors import DagSpecError

CONDITION_OPERATORS = ("equals", "not_equals", "in", "exists")


def parse_field_path(
    path: Any, *, field: str, budget: ExpressionBudget, node_id: str = ""
) -> tuple[str, list[str]]:
    """`classify.result.type` -> ("classify", ["result", "type"])."""
    if not isinstance(path, str) or "." not in path:
        raise DagSpecError(
            f"{field} must look like '<node>.result.<key>' or '<node>.status'", field=field
        )
    try:
        node, *rest = dotted_path_check(path, budget=budget)
    except BudgetExceeded as error:
        raise DagSpecError(f"{field}{_of(node_id)}: {error.message}", field=field) from error
    if rest[0] not in ("result", "status") or (rest[0] == "status" and len(rest) != 1):
        raise DagSpecError(
            f"{field} must look like '<node>.result.<key>' or '<node>.status'", field=field
        )
    return node, rest


def _of(node_id: str) -> str:
    return f" (task {node_id!r})" if node_id else ""


def condition_parse(
    raw: Any, *, field: str, node_id: str, budget: ExpressionBudget
) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or ("field" in raw) == ("path" in raw):
        raise DagSpecError(
            f"{field} must be an object with one of 'field' or 'path' (JSONPath) and one operator",
            field=field,
        )
    source = "path" if "path" in raw else "field"
    operators = [op for op in CONDITION_OPERATORS if op in raw]
    unknown = set(raw) - {source, *CONDITION_OPERATORS}
    if len(operators) != 1 or unknown:
        raise DagSpecError(
            f"{field} needs exactly one of {', '.join(CONDITION_OPERATORS)}", field=field
        )
    if source == "path":
        _condition_path(raw["path"], field=f"{field}.path", node_id=node_id, budget=budget)
    else:
        parse_field_path(raw["field"], field=f"{field}.field", budget=budget, node_id=node_id)
    if operators[0] == "in" and not isinstance(raw["in"], list):
        raise DagSpecError(f"{field}.in must be a list", field=f"{field}.in")
    if operators[0] == "exists" and not isinstance(raw["exists"], bool):
        raise DagSpecError(f"{field}.exists must be true or false", field=f"{field}.exists")
    return {source: raw[source], operators[0]: raw[operators[0]]}


def _condition_path(path: Any, *, field: str, node_id: str, budget: ExpressionBudget) -> None:
    """A JSONPath condition's query must parse (RFC 9535) and be within the budget; the error
    names the node and says where the query breaks or which limit it passes."""
    if not isinstance(path, str) or not path.startswith("$"):
        raise DagSpecError(
            f"{field} (task {node_id!r}) must be a JSONPath query starting with '$'", field=field
        )
    try:
        path_check(path, budget=budget)
    except BudgetExceeded as error:
        raise DagSpecError(f"{field} (task {node_id!r}): {error.message}", field=field) from error
    except JSONPathError as error:
        raise DagSpecError(
            f"{field} (task {node_id!r}) is not valid JSONPath: {error}", field=field
        ) from error


def condition_names(condition: Mapping[str, Any] | None, *, budget: ExpressionBudget) -> str | None:
    """The node a condition reads, when it names one (checked to be upstream)."""
    if not condition:
        return None
    if "path" in condition:
        return path_first_node(condition["path"], budget=budget)
    return condition["field"].split(".")[0]


def map_over_parse(
    raw: Any, *, field: str, node_id: str, budget: ExpressionBudget, max_items: int
) -> dict[str, Any]:
    if isinstance(raw, list):
        if len(raw) > max_items:
            raise DagSpecError(
                f"{field}{_of(node_id)} has {len(raw)} items; at most {max_items} are allowed",
                field=field,
            )
        return {"items": raw}
    path = raw.get("field") if isinstance(raw, Mapping) else raw
    _node, rest = parse_field_path(path, field=field, budget=budget, node_id=node_id)
    if rest[0] != "result":
        raise DagSpecError(f"{field} must point into an upstream result", field=field)
    return {"field": path}
