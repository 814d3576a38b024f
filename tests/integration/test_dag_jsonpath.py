"""A JSONPath condition picks the branch of a DAG run on a real worker."""

from __future__ import annotations

import pytest

from tests.integration.test_dag_runs import node, run_dag

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_jsonpath_condition_takes_the_branch_its_upstream_result_selects(tenant, live_worker):
    items = [{"kind": "receipt", "total": 3}, {"kind": "invoice", "total": 40}]
    tasks = [
        node(
            "classify",
            handler={"type": "python", "callable": "echo"},
            parameters={"items": items},
        ),
        node(
            "big-invoice",
            "classify",
            condition={"path": "$.classify.result.items[?@.total > 10].kind", "equals": "invoice"},
        ),
        node(
            "first-is-invoice",
            "classify",
            condition={"path": "$.classify.result.items[0].kind", "equals": "invoice"},
        ),
        node(
            "old-style",
            "classify",
            condition={"field": "classify.result.items.0.kind", "equals": "receipt"},
        ),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks)
    statuses = {n: s.status for n, s in nodes.items()}
    assert statuses == {
        "classify": "success",
        "big-invoice": "success",
        "first-is-invoice": "skipped",
        "old-style": "success",
    }
    assert run.status == "success"
    assert nodes["big-invoice"].result["upstream"]["classify"]["items"] == items
    assert nodes["first-is-invoice"].execution_id is None
