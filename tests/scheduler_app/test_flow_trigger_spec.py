"""The singleton and debounce spec (pure): what a key may name, bad input, and the key."""

from __future__ import annotations

import pytest

from budgets.limits import ExpressionBudget
from scheduler_app.flow_spec import FlowSpecError
from scheduler_app.flow_trigger_spec import (
    KeyContext,
    flow_key_render,
    flow_trigger_fields,
)
from scheduler_app.run_key_templates import KeyTemplateError

CONTEXT = KeyContext(
    parameters={"customer_id": 42, "region": "eu", "job": {"id": "x"}},
    task="sync",
    dag="",
    tenant="acme",
)


def test_a_key_reads_parameters_task_dag_and_tenant():
    key = flow_key_render(
        "{{tenant}}/{{task}}/{{dag}}/{{ parameters.customer_id }}/{{parameters.job.id}}",
        context=CONTEXT,
    )
    assert key == "acme/sync//42/x"


def test_a_missing_parameter_keys_as_empty_not_as_a_refusal():
    assert flow_key_render("c-{{parameters.absent}}", context=CONTEXT) == "c-"


def test_the_defaults_key_on_the_task_and_wait_ten_windows():
    fields = flow_trigger_fields({"singleton": {}, "debounce": None})
    assert fields == {"singleton": {"key": "{{task}}"}, "debounce": None}
    fields = flow_trigger_fields({"debounce": {"seconds": 30}})
    assert fields["debounce"] == {"key": "{{task}}", "seconds": 30, "max_wait_seconds": 300}


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"singleton": {"key": "{{secret:db}}"}}, "singleton.key", "may not read a secret"),
        ({"singleton": {"key": "{{parameters}}"}}, "singleton.key", "unknown variable"),
        ({"singleton": {"key": "{{ env.HOME }}"}}, "singleton.key", "unknown variable"),
        ({"singleton": {"key": ""}}, "singleton.key", "non-empty"),
        ({"singleton": {"key": "x" * 256}}, "singleton.key", "at most 255"),
        ({"singleton": {"key": "a", "max": 2}}, "singleton.max", "not 'max'"),
        ({"singleton": "yes"}, "singleton", "JSON object"),
        ({"debounce": {"key": "{{task}}"}}, "debounce.seconds", "required"),
        ({"debounce": {"seconds": 0}}, "debounce.seconds", "from 1 to"),
        ({"debounce": {"seconds": -5}}, "debounce.seconds", "from 1 to"),
        ({"debounce": {"seconds": "30"}}, "debounce.seconds", "whole number"),
        ({"debounce": {"seconds": 86_401}}, "debounce.seconds", "from 1 to"),
        (
            {"debounce": {"seconds": 30, "max_wait_seconds": 10}},
            "debounce.max_wait_seconds",
            "30 to",
        ),
        ({"debounce": {"key": "{{tenant.secret}}", "seconds": 3}}, "debounce.key", "unknown"),
        ({"singleton": {}, "debounce": {"seconds": 3}}, "debounce", "not both"),
    ],
)
def test_bad_input_names_its_field(spec, field, says):
    with pytest.raises(FlowSpecError, match=says) as raised:
        flow_trigger_fields(spec)
    assert raised.value.field == field


def test_a_key_is_under_the_expression_budget():
    with pytest.raises(FlowSpecError, match="placeholders; at most 16"):
        flow_trigger_fields({"singleton": {"key": "{{task}}" * 17}})
    small = ExpressionBudget(max_output_chars=100)
    big = KeyContext(parameters={"blob": "x" * 5000}, task="t", dag="", tenant="a")
    with pytest.raises(KeyTemplateError, match="output budget"):
        flow_key_render("{{parameters.blob}}", context=big, budget=small)


def test_a_long_key_is_kept_as_its_hash():
    big = KeyContext(parameters={"blob": "x" * 1000}, task="t", dag="", tenant="a")
    key = flow_key_render("{{parameters.blob}}", context=big)
    assert key.startswith("sha256:") and len(key) == 71
