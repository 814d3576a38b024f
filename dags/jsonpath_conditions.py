"""JSONPath conditions (RFC 9535): `{"path": "$.classify.result.items[0].kind", "equals": ...}`.

Pure Python, no Django. The query runs over one document holding every upstream node of
the node being decided, `{<node id>: {"result": <its result>, "status": <its status>}}`, so
`$.classify.result.type` reads what the `field` form spells `classify.result.type`, and
`$.classify.status` its status. Nodes that are not upstream are not in the document.

The library is `jsonpath-rfc9535`, which implements the RFC and nothing beyond it (no
extension syntax that a later version could change the meaning of). Compiled queries are
cached: a run evaluates the same few conditions again and again.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonpath_rfc9535
from jsonpath_rfc9535 import JSONPathError
from jsonpath_rfc9535.segments import JSONPathChildSegment
from jsonpath_rfc9535.selectors import NameSelector

__all__ = ["JSONPathError", "path_compile", "path_condition_holds", "path_first_node"]


@functools.lru_cache(maxsize=1024)
def path_compile(path: str) -> jsonpath_rfc9535.JSONPathQuery:
    """The compiled query; raises JSONPathError (with the line and column) if it does not parse."""
    return jsonpath_rfc9535.compile(path)


def path_first_node(path: str) -> str | None:
    """The node a query starts from when its first step names one (`$.classify...` or
    `$['classify']...`), else None (a wildcard or a descendant search, which may reach any
    upstream node)."""
    segments = path_compile(path).segments
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
    condition: Mapping[str, Any], *, results: Mapping[str, Any], statuses: Mapping[str, str]
) -> bool:
    """A query may select several values (wildcards, filters, `..`): `equals` and `in` hold
    when any selected value matches, `not_equals` when none does, `exists` when some selected
    value is not null. A query that selects nothing holds only for `not_equals` and
    `exists: false`, as a missing `field` does."""
    values = path_compile(condition["path"]).find(_document(results, statuses)).values()
    if "exists" in condition:
        return any(value is not None for value in values) == condition["exists"]
    if "equals" in condition:
        return any(value == condition["equals"] for value in values)
    if "not_equals" in condition:
        return all(value != condition["not_equals"] for value in values)
    return any(value in condition["in"] for value in values)
