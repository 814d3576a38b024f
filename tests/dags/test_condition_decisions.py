"""A node's condition is decided after the transaction that made the node ready, never in it
(that transaction holds the run's lock and, in a worker, a run's finish); a decision whose
process died is made by the housekeeping; a condition over its budget fails its node, naming
the budget. The engine is driven here without a worker: a finish is the engine call a worker
makes, and the commit callbacks are run (or not, as in a process that died) by hand."""

from __future__ import annotations

import pytest
from django.db import transaction

from dags.engine.completion import node_complete_locking
from dags.models import DagNodeState, DagVersion
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from dags.services.undecided import undecided_nodes_decide
from dags.versions import graph_of_version

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


def _run(tenant, condition):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "branch",
            "tasks": [
                {"id": "a", "handler": NOOP},
                {"id": "b", "handler": NOOP, "depends_on": ["a"], "condition": condition},
                {"id": "c", "handler": NOOP, "depends_on": ["b"]},
            ],
        },
    )
    return dag, dag_trigger(dag=dag)


def _finish_a(run, result):
    with transaction.atomic():
        assert node_complete_locking(
            run_id=run.id, version_id=run.version_id, node_id="a", status="success", result=result
        )


def _status(run, node_id):
    return DagNodeState.objects.get(run=run, node_id=node_id)


def test_a_condition_is_decided_after_the_transaction_that_made_its_node_ready(
    tenant, django_capture_on_commit_callbacks
):
    _, run = _run(tenant, {"path": "$.a.result.kind", "equals": "invoice"})
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        _finish_a(run, {"kind": "invoice"})
    # Committed: a is counted, b is ready but not decided (no execution, still waiting).
    b = _status(run, "b")
    assert (b.status, b.remaining_upstream, b.execution_id) == ("waiting", 0, None)
    for callback in callbacks:
        callback()
    assert _status(run, "b").status == "queued"


def test_a_condition_that_does_not_hold_skips_its_node_and_what_follows(
    tenant, django_capture_on_commit_callbacks
):
    _, run = _run(tenant, {"path": "$.a.result.kind", "equals": "invoice"})
    with django_capture_on_commit_callbacks(execute=True):
        _finish_a(run, {"kind": "receipt"})
    assert (_status(run, "b").status, _status(run, "c").status) == ("skipped", "skipped")


def test_a_node_whose_decision_never_came_is_decided_by_the_housekeeping(
    tenant, django_capture_on_commit_callbacks
):
    _, run = _run(tenant, {"field": "a.result.kind", "equals": "invoice"})
    with django_capture_on_commit_callbacks(execute=False):
        _finish_a(run, {"kind": "invoice"})  # the process dies before deciding b
    assert undecided_nodes_decide(grace_seconds=60) == 0  # too recent: its process may be on it
    assert _status(run, "b").status == "waiting"
    assert undecided_nodes_decide(grace_seconds=0) == 1
    assert _status(run, "b").status == "queued"
    assert undecided_nodes_decide(grace_seconds=0) == 0


def test_a_condition_stored_before_the_budget_fails_its_node_naming_the_budget(
    tenant, django_capture_on_commit_callbacks
):
    dag, run = _run(tenant, {"path": "$.a.result.kind", "equals": "x"})
    # The review's query, stored before saving checked it (as a DAG saved before this fix).
    version = DagVersion.objects.get(dag=dag)
    spec = version.spec
    spec["tasks"][1]["condition"] = {"path": "$.a.result..*..*..*..*..*[?@=='no']", "equals": 1}
    DagVersion.objects.filter(id=version.id).update(spec=spec)
    graph_of_version.cache_clear()  # as a process that had not read it yet
    with django_capture_on_commit_callbacks(execute=True):
        _finish_a(run, [[[[[[[[[]]]]]]]]])
    b = _status(run, "b")
    assert b.status == "failed"
    assert b.error_message.startswith("condition over its descendant segments budget")
    assert _status(run, "c").status == "upstream_failed"


def test_a_condition_past_the_node_budget_fails_its_node(
    tenant, settings, django_capture_on_commit_callbacks
):
    settings.EXPRESSION_BUDGET = {**settings.EXPRESSION_BUDGET, "MAX_NODES": 1000}
    _, run = _run(tenant, {"path": "$.a.result.rows.*.*", "equals": 7})
    with django_capture_on_commit_callbacks(execute=True):
        _finish_a(run, {"rows": [list(range(50)) for _ in range(50)]})
    b = _status(run, "b")
    assert b.status == "failed"
    assert "node budget" in b.error_message and "1000 nodes" in b.error_message
