"""RFC 9535 JSONPath under the expression budget (`budgets.limits`).

A query's cost is the number of nodes it makes the evaluator visit, and that grows with the
product of its descendant segments: `$.a.result..*..*..*..*..*[?@=='no']` over a 288-byte
document took 10.1 s, each further `..*` about 8 times that. So:

* checked (`jsonpath_check`, when a DAG is saved and again before each evaluation): at most
  `max_chars` characters, `max_segments` segments and `max_descendant_segments` descendant
  segments (`..`), counting those of the queries inside filters; every literal pattern of
  `match()`/`search()` must be an I-Regexp RE2 compiles;
* metered (`jsonpath_values`): every node visited, produced or tested by a filter is charged to
  a `Meter`, which stops the evaluation past `max_nodes` or `cpu_seconds`;
* linear: `match()`/`search()` run on RE2 (`budgets.regex`).

The meter is wired into the library by its own extension points (a parser that builds metered
segments and filter selectors, an environment with other function extensions); the library's
module-level `compile` is left as it is. Descendant segments are walked without recursion, so a
deeply nested document costs nodes, not stack.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from jsonpath_rfc9535 import JSONPathEnvironment, JSONPathError, JSONPathQuery
from jsonpath_rfc9535.filter_expressions import (
    ComparisonExpression,
    FilterExpression,
    FilterQuery,
    FunctionExtension,
    LogicalExpression,
    PrefixExpression,
    StringLiteral,
)
from jsonpath_rfc9535.node import JSONPathNode
from jsonpath_rfc9535.parse import Parser
from jsonpath_rfc9535.segments import (
    JSONPathChildSegment,
    JSONPathRecursiveDescentSegment,
    JSONPathSegment,
)
from jsonpath_rfc9535.selectors import FilterSelector

from budgets.limits import BudgetExceeded, ExpressionBudget, metered, spend, text_check
from budgets.regex import LinearMatch, LinearSearch, PatternRefused, pattern_compile

__all__ = ["BudgetExceeded", "JSONPathError", "jsonpath_check", "jsonpath_values"]

PATTERN_FUNCTIONS = ("match", "search")


class _MeteredChildSegment(JSONPathChildSegment):
    def resolve(self, nodes: Iterable[JSONPathNode]) -> Iterable[JSONPathNode]:
        for found in super().resolve(nodes):
            spend()
            yield found


class _MeteredDescendantSegment(JSONPathRecursiveDescentSegment):
    def resolve(self, nodes: Iterable[JSONPathNode]) -> Iterable[JSONPathNode]:
        for node in nodes:
            for descendant in _descendants(node):
                spend()
                for selector in self.selectors:
                    for found in selector.resolve(descendant):
                        spend()
                        yield found


def _descendants(node: JSONPathNode) -> Iterator[JSONPathNode]:
    """The node and its descendants that are containers, in document order (pre-order), from
    an explicit stack."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        value = current.value
        if isinstance(value, dict):
            children = [
                current.new_child(child, key, current)
                for key, child in value.items()
                if isinstance(child, dict | list)
            ]
        elif isinstance(value, list):
            children = [
                current.new_child(child, index, current)
                for index, child in enumerate(value)
                if isinstance(child, dict | list)
            ]
        else:
            continue
        stack.extend(reversed(children))


class _MeteredFilterSelector(FilterSelector):
    def resolve(self, node: JSONPathNode) -> Iterable[JSONPathNode]:
        if isinstance(node.value, dict | list):
            spend(len(node.value))  # one test of the filter per member
        return super().resolve(node)


class _MeteredParser(Parser):
    def parse_query(self, stream, *, in_filter: bool = False) -> Iterable[JSONPathSegment]:
        for segment in super().parse_query(stream, in_filter=in_filter):
            metered_class = (
                _MeteredDescendantSegment
                if isinstance(segment, JSONPathRecursiveDescentSegment)
                else _MeteredChildSegment
            )
            yield metered_class(env=self.env, token=segment.token, selectors=segment.selectors)

    def parse_filter_selector(self, stream) -> FilterSelector:
        selector = super().parse_filter_selector(stream)
        return _MeteredFilterSelector(
            env=self.env, token=selector.token, expression=selector.expression
        )


class _BudgetedEnvironment(JSONPathEnvironment):
    parser_class = _MeteredParser

    def setup_function_extensions(self) -> None:
        super().setup_function_extensions()
        self.function_extensions["match"] = LinearMatch()
        self.function_extensions["search"] = LinearSearch()


_ENVIRONMENT = _BudgetedEnvironment()


@functools.lru_cache(maxsize=1024)
def _compile(path: str) -> JSONPathQuery:
    return _ENVIRONMENT.compile(path)


def _expressions(expression: Any) -> Iterator[Any]:
    """Every expression inside a filter's, itself included (iteratively)."""
    todo = [expression]
    while todo:
        current = todo.pop()
        yield current
        if isinstance(current, FilterExpression):
            todo.append(current.expression)
        elif isinstance(current, PrefixExpression):
            todo.append(current.right)
        elif isinstance(current, LogicalExpression | ComparisonExpression):
            todo.extend((current.left, current.right))
        elif isinstance(current, FunctionExtension):
            todo.extend(current.args)


def _shape(query: JSONPathQuery) -> tuple[int, int, list[str]]:
    """(segments, descendant segments, literal patterns) of a query and its filters' queries."""
    segments = descendants = 0
    patterns: list[str] = []
    todo = [query]
    while todo:
        current = todo.pop()
        for segment in current.segments:
            segments += 1
            descendants += isinstance(segment, JSONPathRecursiveDescentSegment)
            for selector in segment.selectors:
                if not isinstance(selector, FilterSelector):
                    continue
                for expression in _expressions(selector.expression):
                    if isinstance(expression, FilterQuery):
                        todo.append(expression.query)
                    elif (
                        isinstance(expression, FunctionExtension)
                        and expression.name in PATTERN_FUNCTIONS
                        and isinstance(expression.args[1], StringLiteral)
                    ):
                        patterns.append(expression.args[1].value)
    return segments, descendants, patterns


def jsonpath_check(path: str, *, budget: ExpressionBudget) -> JSONPathQuery:
    """The compiled query if it parses and is within the budget's text limits; else
    JSONPathError (where it breaks) or BudgetExceeded (which limit, by how much)."""
    text_check(path, budget=budget, what="the query")
    query = _compile(path)
    segments, descendants, patterns = _shape(query)
    if segments > budget.max_segments:
        raise BudgetExceeded(
            "segments",
            f"the query has {segments} segments; at most {budget.max_segments} are allowed "
            "(filters' queries included)",
        )
    if descendants > budget.max_descendant_segments:
        raise BudgetExceeded(
            "descendant_segments",
            f"the query has {descendants} descendant segments ('..'); at most "
            f"{budget.max_descendant_segments} is allowed (filters' queries included): each "
            "one multiplies the nodes visited",
        )
    for pattern in patterns:
        try:
            pattern_compile(pattern, budget=budget)
        except PatternRefused as error:
            raise JSONPathError(f"match()/search(): {error}") from error
    return query


def jsonpath_values(path: str, document: Any, *, budget: ExpressionBudget) -> list[Any]:
    """The values `path` selects in `document`, checked and metered: BudgetExceeded when the
    query or its evaluation is over budget."""
    query = jsonpath_check(path, budget=budget)
    with metered(budget) as meter:
        values = [node.value for node in query.finditer(document)]
        meter.clock_check()
    return values
