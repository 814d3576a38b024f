"""The flow-control fields of a task spec: what is accepted, what is refused (naming the
field), and the limits a run is under. Pure: no database."""

from __future__ import annotations

import pytest

from scheduler_app.flow_spec import (
    SECRET_MARK,
    FlowSpecError,
    RunContext,
    dag_of_node_task,
    flow_limits,
    flow_spec_parse,
)

A = "{{ parameters.a }}"
C = "concurrency[0]"
RUN = RunContext(tenant_id="t1", task="sync", dag="", parameters={"customer_id": "42"})


def refused(spec) -> str:
    with pytest.raises(FlowSpecError) as error:
        flow_spec_parse(spec)
    return error.value.field


def test_a_spec_without_flow_fields_keeps_what_the_task_has():
    assert flow_spec_parse({"name": "x"}) is None


def test_the_issue_shapes_are_normalized():
    flow = flow_spec_parse(
        {
            "concurrency": [{"key": "{{ parameters.customer_id }}", "max_running": 2}],
            "pool": "warehouse",
            "rate_limit": {"key": "{{ parameters.account }}", "limit": 10, "per": "minute"},
        }
    )
    assert flow == {
        "concurrency": [
            {"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": "queue"}
        ],
        "pool": "warehouse",
        "pool_slots": 1,
        "rate_limit": [{"key": "{{ parameters.account }}", "limit": 10, "per": "minute"}],
    }


def test_null_fields_remove_flow_control():
    assert flow_spec_parse({"concurrency": None, "pool": None}) == {}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"concurrency": [{"key": "{{ customer }}", "max_running": 1}]}, "concurrency[0].key"),
        ({"concurrency": [{"key": A, "max_running": 0}]}, C + ".max_running"),
        ({"concurrency": [{"key": A, "max_running": -3}]}, C + ".max_running"),
        ({"concurrency": [{"key": A, "max_running": True}]}, C + ".max_running"),
        ({"concurrency": [{"key": "k", "max_running": 1, "strategy": "lifo"}]}, C + ".strategy"),
        ({"concurrency": [{"key": "k", "max_running": 1, "extra": 1}]}, "concurrency[0]"),
        ({"concurrency": "k"}, "concurrency"),
        ({"rate_limit": [{"key": "k", "limit": 0}]}, "rate_limit[0].limit"),
        ({"rate_limit": [{"key": "k", "limit": 5, "per": "day"}]}, "rate_limit[0].per"),
        ({"rate_limit": [{"key": "", "limit": 5}]}, "rate_limit[0].key"),
        ({"pool": "no spaces"}, "pool"),
        ({"pool": "p", "pool_slots": 0}, "pool_slots"),
        ({"pool_slots": 2}, "pool_slots"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(spec, field):
    assert refused(spec) == field


@pytest.mark.parametrize(
    "template",
    ["{{secret:stripe_key}}", "{{ secret:stripe_key }}", "x-{{SECRET:k}}", "{{ secrets.k }}"],
)
def test_a_key_template_cannot_read_a_secret(template):
    assert refused({"concurrency": [{"key": template, "max_running": 1}]}) == "concurrency[0].key"


def test_a_parameter_holding_a_secret_reference_is_not_rendered_into_the_key():
    run = RunContext(
        tenant_id="t1", task="sync", dag="", parameters={"account": "{{secret:stripe_key}}"}
    )
    flow = flow_spec_parse({"rate_limit": [{"key": "acct-{{ parameters.account }}", "limit": 1}]})
    (limit,) = flow_limits(flow, run=run, pool_sizes={})
    assert limit.shown == f"acct-{SECRET_MARK}"
    assert "stripe_key" not in limit.key


def test_limits_of_a_run_render_task_dag_tenant_and_parameters():
    flow = flow_spec_parse(
        {
            "concurrency": [
                {"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": "skip"},
                {"key": "{{ task }}/{{ dag }}/{{ tenant }}", "max_running": 5},
            ],
            "pool": "warehouse",
            "pool_slots": 3,
            "rate_limit": [{"key": "stripe-api", "limit": 100, "per": "hour"}],
        }
    )
    limits = flow_limits(flow, run=RUN, pool_sizes={"warehouse": 7})
    assert [(x.kind, x.shown, x.maximum, x.weight) for x in limits] == [
        ("concurrency", "42", 2, 1),
        ("concurrency", "sync//t1", 5, 1),
        ("pool", "warehouse", 7, 3),
        ("rate_limit", "stripe-api", 100, 1),
    ]
    assert limits[0].strategy == "skip"
    assert limits[3].per_seconds == 3600
    # Counter keys are the tenant's: two tenants' equal keys never share a counter.
    other = flow_limits(
        flow, run=RunContext("t2", "sync", "", {"customer_id": "42"}), pool_sizes={}
    )
    assert {x.key for x in limits}.isdisjoint(x.key for x in other)


def test_a_pool_that_is_gone_has_no_slots():
    flow = flow_spec_parse({"pool": "gone"})
    (limit,) = flow_limits(flow, run=RUN, pool_sizes={})
    assert limit.maximum == 0


def test_a_missing_parameter_shares_one_key():
    flow = flow_spec_parse({"concurrency": [{"key": "c-{{ parameters.nope }}", "max_running": 1}]})
    (limit,) = flow_limits(flow, run=RUN, pool_sizes={})
    assert limit.shown == "c-"


def test_the_dag_of_a_node_task():
    assert dag_of_node_task("node 'load' of DAG 'etl'") == "etl"
    assert dag_of_node_task("a task") == ""
