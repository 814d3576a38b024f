"""match()/search() on RE2: linear whatever the pattern, and I-Regexp's meaning of `.`."""

from __future__ import annotations

import pytest

from budgets.jsonpath import jsonpath_values
from budgets.limits import BudgetExceeded, ExpressionBudget, metered
from budgets.regex import LinearMatch, LinearSearch

BUDGET = ExpressionBudget()


def test_the_exponential_pattern_answers_and_costs_what_the_text_is_long():
    text = "a" * 20_000 + "b"
    match = LinearMatch()
    with metered(BUDGET) as meter:
        assert match(text, "(a|aa)*") is False  # a backtracking engine would not return
        assert match("a" * 20_000, "(a|aa)*") is True
    # Charged by length (64 characters a unit), the same for any pattern.
    assert meter.spent == 2 + (len(text) + 7) // 64 + (20_000 + 7) // 64


def test_dot_is_any_character_but_a_line_break():
    match = LinearMatch()
    with metered(BUDGET):
        assert match("x", ".") is True
        assert match("\r", ".") is False
        assert match("\n", ".") is False
        assert match(".", "[.]") is True
        assert match("é", r"\p{L}") is True


def test_search_finds_a_substring_and_invalid_input_selects_nothing():
    search = LinearSearch()
    with metered(BUDGET):
        assert search("an invoice", "voic") is True
        assert search("an invoice", "^voic") is False
        assert search(3, "3") is False
        assert search("x", "(") is False  # not an I-Regexp: false, as the RFC says


def test_a_pattern_from_the_data_is_held_to_the_same_length_cap():
    document = {"rule": {"pattern": "a" * 600}, "names": ["a"]}
    with pytest.raises(BudgetExceeded) as refused:
        jsonpath_values("$.names[?match(@, $.rule.pattern)]", document, budget=BUDGET)
    assert refused.value.budget == "pattern"
