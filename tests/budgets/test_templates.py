"""Dotted paths and `{{ }}` templates under the expression budget."""

from __future__ import annotations

import pytest

from budgets.limits import BudgetExceeded, ExpressionBudget
from budgets.templates import dotted_path_check, template_placeholders, template_render

BUDGET = ExpressionBudget()


def test_a_dotted_path_is_capped_in_parts_and_length():
    assert dotted_path_check("classify.result.items.0", budget=BUDGET) == [
        "classify",
        "result",
        "items",
        "0",
    ]
    with pytest.raises(BudgetExceeded) as refused:
        dotted_path_check("a" + ".b" * 20, budget=BUDGET)
    assert refused.value.budget == "segments"
    with pytest.raises(BudgetExceeded) as refused:
        dotted_path_check("a." + "b" * 600, budget=BUDGET)
    assert refused.value.budget == "length"


def test_placeholders_are_found_as_before_and_unclosed_ones_stay_text():
    found = template_placeholders("{{ parameters.region }}:{{scheduled_date}}", budget=BUDGET)
    assert [p.name for p in found] == ["parameters.region", "scheduled_date"]
    assert [p.name for p in template_placeholders("{{{a}}", budget=BUDGET)] == ["a"]
    assert template_placeholders("{{ a {{ b", budget=BUDGET) == []
    # Unclosed `{{` all along the text: found in one pass (refused only for its length).
    assert template_placeholders("{{ x " * 100, budget=BUDGET) == []


def test_too_many_placeholders_are_refused():
    with pytest.raises(BudgetExceeded) as refused:
        template_placeholders("{{a}}" * 17, budget=BUDGET)
    assert refused.value.budget == "segments"


def test_rendering_stops_at_the_output_budget():
    small = ExpressionBudget(max_output_chars=100)
    assert template_render("k:{{v}}", fill=lambda name: "x" * 10, budget=small) == "k:" + "x" * 10
    with pytest.raises(BudgetExceeded) as stopped:
        template_render("{{v}}-{{v}}", fill=lambda name: "x" * 60, budget=small)
    assert stopped.value.budget == "output"
