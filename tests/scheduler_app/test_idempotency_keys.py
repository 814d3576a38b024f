"""The idempotency key template (pure): what it may name, and what it renders to."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler_app.run_key_templates import KeyTemplateError, key_render, key_template_check

FIRE = datetime(2026, 3, 9, 3, 30, tzinfo=UTC)  # 23:30 on the 8th in New York


def test_the_documents_template_renders_region_and_the_local_date():
    key = key_render(
        "{{parameters.region}}:{{scheduled_date}}",
        parameters={"region": "eu"},
        scheduled_at=FIRE,
        timezone_name="America/New_York",
    )
    assert key == "eu:2026-03-08"


def test_nested_and_non_string_parameters_and_every_time_name():
    key = key_render(
        "{{ parameters.job.id }}/{{parameters.n}}/{{scheduled_at}}/{{scheduled_time}}",
        parameters={"job": {"id": "x"}, "n": [1, 2]},
        scheduled_at=FIRE,
        timezone_name="UTC",
    )
    assert key == "x/[1, 2]/2026-03-09T03:30:00Z/03:30:00"


def test_a_long_key_is_kept_as_its_hash():
    key = key_render(
        "{{parameters.blob}}", parameters={"blob": "x" * 1000}, scheduled_at=FIRE, timezone_name=""
    )
    assert key.startswith("sha256:") and len(key) == 71


def test_a_missing_parameter_is_an_error_not_an_empty_key():
    with pytest.raises(KeyTemplateError, match="no parameter region"):
        key_render("{{parameters.region}}", parameters={}, scheduled_at=FIRE, timezone_name="UTC")


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("", "non-empty"),
        ("constant", "names no placeholder"),
        ("{{secret:db}}", "unknown placeholder"),
        ("{{parameters}}", "unknown placeholder"),
        ("{{scheduled_week}}", "unknown placeholder"),
        ("{{scheduled_date}}" * 20, "at most 255"),
    ],
)
def test_bad_templates_are_refused(template, says):
    with pytest.raises(KeyTemplateError, match=says):
        key_template_check(template)


def test_a_template_is_under_the_expression_budget():
    from budgets.limits import ExpressionBudget

    with pytest.raises(KeyTemplateError, match="17 placeholders; at most 16"):
        key_template_check("{{scheduled_at}}" * 4 + "{{x}}" * 13)
    with pytest.raises(KeyTemplateError, match="parts; at most 16"):
        key_template_check("{{parameters" + ".a" * 16 + "}}")
    # Rendering stops at the output budget: a huge parameter is not copied into the key.
    small = ExpressionBudget(max_output_chars=1000)
    with pytest.raises(KeyTemplateError, match="output budget"):
        key_render(
            "{{parameters.blob}}",
            parameters={"blob": "x" * 5000},
            scheduled_at=FIRE,
            timezone_name="UTC",
            budget=small,
        )
