"""The `retry` failure policy on real workers: a failed node is tried again, then the run
goes on (DAG level: as skip_downstream; node level: under the DAG's own policy)."""

from __future__ import annotations

import pytest

from scheduler_app.models import TaskExecution
from tests.integration.test_dag_runs import node, run_dag

pytestmark = pytest.mark.django_db(transaction=True)

QUICK = {"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0.2}
PERMANENT = {"type": "python", "callable": "fail_permanently"}


def recovers_on(attempt: int) -> dict:
    return {"type": "python", "callable": "fail_permanently_before"}, {
        "succeed_on_attempt": attempt
    }


def chain_of(state) -> list[TaskExecution]:
    return list(
        TaskExecution.platform.filter(root_execution_id=state.execution_id).order_by("attempt")
    )


def test_dag_level_retry_retries_then_goes_on_as_skip_downstream(tenant, live_worker, beats):
    beats("solo")  # publishes the pending retries when they fall due
    handler, parameters = recovers_on(3)
    tasks = [
        node("a"),
        node("recovers", "a", handler=handler, parameters=parameters),
        node("bad", "a", handler=PERMANENT),
        node("after-recovers", "recovers"),
        node("after-bad", "bad"),
        node("cleanup", "bad", trigger_rule="all_done"),
    ]
    run, nodes = run_dag(
        tenant, live_worker, tasks, timeout=90, failure_policy="retry", retry_policy=QUICK
    )
    statuses = {n: s.status for n, s in nodes.items()}
    assert statuses == {
        "a": "success",
        "recovers": "success",
        "bad": "failed",
        "after-recovers": "success",
        "after-bad": "upstream_failed",
        "cleanup": "success",
    }
    assert run.status == "partially_completed"
    recovered = chain_of(nodes["recovers"])
    assert [(e.attempt, e.status) for e in recovered] == [
        (1, "failed"),
        (2, "failed"),
        (3, "success"),
    ]
    assert nodes["recovers"].result == {"attempt": 3}
    # Every attempt of the failed node ran, under the DAG's policy; only the last is a
    # dead letter.
    bad = chain_of(nodes["bad"])
    assert [(e.attempt, e.max_attempts, e.status) for e in bad] == [
        (1, 3, "failed"),
        (2, 3, "failed"),
        (3, 3, "failed"),
    ]
    assert [e.dead_lettered for e in bad] == [False, False, True]
    assert bad[1].started_at >= bad[0].completed_at


def test_node_level_retry_under_a_fail_all_dag(tenant, live_worker, beats):
    beats("solo")
    handler, parameters = recovers_on(2)
    tasks = [
        node(
            "recovers",
            handler=handler,
            parameters=parameters,
            failure_policy="retry",
            retry_policy={"max_attempts": 2, "backoff": "fixed", "base_delay_seconds": 0},
        ),
        node("next", "recovers"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks, timeout=90, failure_policy="fail_all")
    assert run.status == "success"
    assert nodes["recovers"].status == "success" and nodes["next"].status == "success"
    assert [e.attempt for e in chain_of(nodes["recovers"])] == [1, 2]
