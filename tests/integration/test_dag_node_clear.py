"""Clearing and marking a node of an ended DAG run, with a real Celery worker running the
nodes again (real PostgreSQL and Redis): the join of a diamond runs exactly once after its
cleared upstream, and a failed node marked succeeded lets its downstream run once."""

from __future__ import annotations

import pytest

from dags.models import DagNodeAttemptExecution, DagNodeExecution, DagNodeState, DagRun
from dags.services.node_actions import dag_node_mark
from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.integration.test_dag_runs import FAIL, ONCE, node, run_dag
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _chains(run, node_id) -> list[TaskExecution]:
    """Every execution chain the node had in its run (current attempt and earlier ones), by
    its first attempt, oldest first."""
    roots = [
        *DagNodeExecution.objects.filter(run=run, node_id=node_id).values_list(
            "execution_root_id", flat=True
        ),
        *DagNodeAttemptExecution.objects.filter(run=run, node_id=node_id).values_list(
            "execution_root_id", flat=True
        ),
    ]
    return list(TaskExecution.platform.filter(id__in=roots).order_by("created_at"))


def _wait_for_end(run, worker) -> DagRun:
    try:
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status not in ("running", "queued"),
            timeout=60,
            message="the DAG run to end again",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    return DagRun.platform.get(id=run.id)


def test_clearing_a_middle_node_with_downstream_runs_the_join_once_after_it(
    tenant, api, live_worker
):
    run, _ = run_dag(
        tenant,
        live_worker,
        [node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")],
    )
    assert run.status == "success"
    response = api.post(
        f"/api/v1/dag-runs/{run.id}/nodes/b/clear",
        {"downstream": True, "note": "upstream data fixed"},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert response.json()["cleared"] == ["b", "d"]
    ended = _wait_for_end(run, live_worker)
    assert ended.status == "success"
    states = {s.node_id: s for s in DagNodeState.objects.filter(run=run)}
    assert {n: s.status for n, s in states.items()} == dict.fromkeys("abcd", "success")
    chains = {n: _chains(run, n) for n in "abcd"}
    assert [len(chains[n]) for n in "abcd"] == [1, 2, 1, 2]  # a and c kept, b and d once more
    b_again, d_again = chains["b"][-1], chains["d"][-1]
    assert d_again.id == states["d"].execution_id and b_again.id == states["b"].execution_id
    assert d_again.started_at >= b_again.completed_at  # the join waited for the cleared b
    assert d_again.attempt == 1 and d_again.status == "success"
    # The join read the new b's result and c's kept one.
    assert set(states["d"].result["upstream"]) == {"b", "c"}


def test_a_failed_node_marked_succeeded_lets_its_downstream_run_once(tenant, live_worker):
    run, nodes = run_dag(
        tenant,
        live_worker,
        [node("a"), node("bad", "a", handler=FAIL, retry_policy=ONCE), node("after", "bad")],
    )
    assert (nodes["bad"].status, nodes["after"].status) == ("failed", "upstream_failed")
    assert run.status == "partially_completed"
    assert dag_node_mark(
        run=run, node_id="bad", state="succeeded", note="done by hand", actor="user:ops"
    ) == ["after"]
    ended = _wait_for_end(run, live_worker)
    assert ended.status == "success"
    after = DagNodeState.objects.get(run=run, node_id="after")
    assert after.status == "success"
    assert len(_chains(run, "after")) == 1  # it never ran before; once now
    assert len(_chains(run, "bad")) == 1  # marked, not run again


def test_a_stuck_running_node_marked_succeeded_is_stopped_and_its_run_goes_on(tenant, live_worker):
    from dags.services.definitions import dag_create
    from dags.services.runs import dag_trigger

    stuck = {"type": "python", "callable": "sleep"}
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "stuck",
            "tasks": [
                node("a"),
                node("hangs", "a", handler=stuck, parameters={"seconds": 120}),
                node("after", "hangs"),
            ],
        },
    )
    run = dag_trigger(dag=dag)

    def hanging() -> TaskExecution | None:
        state = DagNodeState.objects.get(run=run, node_id="hangs")
        if state.execution_id is None:
            return None
        return TaskExecution.platform.filter(id=state.execution_id, status="running").first()

    running = wait_until(hanging, timeout=60, message="the hanging node to be running")
    assert dag_node_mark(run=run, node_id="hangs", state="succeeded", note="it hung") == []
    ended = _wait_for_end(run, live_worker)
    assert ended.status == "success"
    assert DagNodeState.objects.get(run=run, node_id="after").status == "success"
    assert len(_chains(run, "after")) == 1
    # Its execution was killed, not left to sleep out its two minutes; the kill's finish
    # counted nothing again (after ran once).
    wait_until(
        lambda: TaskExecution.platform.get(id=running.id).status != "running",
        timeout=60,
        message="the hanging execution to be stopped",
    )
    assert TaskExecution.platform.get(id=running.id).status in ("cancelled", "failed")
    assert DagNodeState.objects.get(run=run, node_id="hangs").status == "success"
