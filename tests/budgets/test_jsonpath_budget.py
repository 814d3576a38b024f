"""JSONPath under the expression budget: what is refused when saved, what an evaluation may
spend, and that a query within the budget still means what RFC 9535 says."""

from __future__ import annotations

import json

import pytest

from budgets.jsonpath import JSONPathError, jsonpath_check, jsonpath_values
from budgets.limits import BudgetExceeded, ExpressionBudget, metered

BUDGET = ExpressionBudget()
# The review's document: 288 bytes, nested deep enough for `..*` to multiply.
DEEP = {"a": {"result": json.loads("[" * 60 + "]" * 60)}}


def _refused(path: str, budget: ExpressionBudget = BUDGET) -> BudgetExceeded:
    with pytest.raises(BudgetExceeded) as refused:
        jsonpath_check(path, budget=budget)
    return refused.value


def test_the_reviews_five_descendant_segments_are_refused_when_saved():
    refused = _refused("$.a.result..*..*..*..*..*[?@=='no']")
    assert refused.budget == "descendant_segments"
    assert "5 descendant segments" in refused.message


def test_descendant_segments_inside_filters_count():
    assert _refused("$..a[?@..b]").budget == "descendant_segments"
    assert _refused("$.x[?count($..*) > 1]..y").budget == "descendant_segments"
    jsonpath_check("$..kind", budget=BUDGET)
    jsonpath_check("$.x[?@.y..z]", budget=BUDGET)


def test_length_and_segments_are_capped_filters_included():
    assert _refused("$" + ".abc" * 17).budget == "segments"
    assert _refused("$.a[?@.b.c.d.e.f.g.h.i == 1].j.k.l.m.n.o.p").budget == "segments"
    refused = _refused("$." + "x" * 600)
    assert refused.budget == "length" and "602 characters" in refused.message
    jsonpath_check("$" + ".abc" * 15, budget=BUDGET)


def test_a_pattern_that_is_not_an_i_regexp_is_refused_when_saved():
    with pytest.raises(JSONPathError, match="I-Regexp"):
        jsonpath_check('$[?match(@, "(a")]', budget=BUDGET)
    # Backreferences and lookaround are not I-Regexp: refused, never run.
    with pytest.raises(JSONPathError):
        jsonpath_check('$[?match(@, "(a)\\\\1")]', budget=BUDGET)
    with pytest.raises(JSONPathError):
        jsonpath_check('$[?search(@, "(?=a)")]', budget=BUDGET)


def test_an_evaluation_stops_at_the_node_budget_and_says_so():
    wide = {"a": {"result": [list(range(100)) for _ in range(100)]}}
    small = ExpressionBudget(max_nodes=5_000)
    with pytest.raises(BudgetExceeded) as stopped:
        jsonpath_values("$.a.result.*.*", wide, budget=small)
    assert stopped.value.budget == "nodes"
    assert "5000 nodes" in stopped.value.message
    # One descendant segment over the deep document is within the default budget.
    assert jsonpath_values("$.a.result..*[?@=='no']", DEEP, budget=BUDGET) == []


def test_an_evaluation_stops_at_the_cpu_budget_and_says_so():
    wide = {"a": {"result": [list(range(200)) for _ in range(200)]}}
    no_time = ExpressionBudget(max_nodes=10**9, cpu_seconds=0.0)
    with pytest.raises(BudgetExceeded) as stopped:
        jsonpath_values("$.a.result.*.*", wide, budget=no_time)
    assert stopped.value.budget == "time"
    assert "of CPU" in stopped.value.message


def test_the_check_runs_again_at_evaluation():
    with pytest.raises(BudgetExceeded) as stopped:
        jsonpath_values("$.a.result..*..*[?@=='no']", DEEP, budget=BUDGET)
    assert stopped.value.budget == "descendant_segments"


def test_filters_are_charged_per_candidate():
    document = {"items": [{"total": n} for n in range(1000)]}
    with metered(BUDGET) as meter:
        _ = [
            n.value
            for n in jsonpath_check("$.items[?@.total > 998]", budget=BUDGET).finditer(document)
        ]
    # 1 (items) + 1000 candidates + each candidate's @.total + the one selected.
    assert 2000 <= meter.spent <= 2100


def test_queries_within_the_budget_mean_what_the_rfc_says():
    document = {
        "c": {
            "result": {
                "items": [
                    {"kind": "receipt", "total": 3, "tags": {"x": 1}},
                    {"kind": "invoice", "total": 40},
                ]
            }
        }
    }
    assert jsonpath_values("$.c.result.items[?@.total > 10].kind", document, budget=BUDGET) == [
        "invoice"
    ]
    assert jsonpath_values("$..kind", document, budget=BUDGET) == ["receipt", "invoice"]
    assert jsonpath_values("$..*", {"a": [1, {"b": 2}]}, budget=BUDGET) == [
        [1, {"b": 2}],
        1,
        {"b": 2},
        2,
    ]
    assert jsonpath_values("$.c.result.items[-1:]", document, budget=BUDGET)[0]["total"] == 40
    assert jsonpath_values(
        "$.c.result.items[?length(@.tags) == 1].kind", document, budget=BUDGET
    ) == ["receipt"]
    assert jsonpath_values(
        '$.c.result.items[?match(@.kind, "inv.*")].total', document, budget=BUDGET
    ) == [40]
    assert jsonpath_values(
        '$.c.result.items[?search(@.kind, "ece")].total', document, budget=BUDGET
    ) == [3]


def test_a_deep_document_costs_nodes_not_stack():
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    assert jsonpath_values("$..[?@ == 'x']", {"r": deep}, budget=BUDGET) == []
