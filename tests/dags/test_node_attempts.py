"""Every attempt of a re-run node is kept: the run's re-run and a node's dead letter retried
inside its run no longer overwrite what the node's earlier attempt showed. The services write
the history, the API's run detail returns it (real PostgreSQL; nothing is run by a worker)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from dags.models import (
    DagNodeAttempt,
    DagNodeAttemptExecution,
    DagNodeExecution,
    DagNodeState,
    DagRun,
)
from dags.services.dead_letters import dag_node_dead_letter_retry
from dags.services.runs import dag_run_rerun
from scheduler_app.models import TaskExecution
from tests.dashboard.conftest import ENDED_RUN_STATES as ENDED
from tests.dashboard.conftest import make_dag, make_dag_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def ended_run(tenant):
    dag = make_dag(tenant)
    run = make_dag_run(dag, ENDED)
    DagRun.platform.filter(id=run.id).update(
        status="failed", completed_at=timezone.now(), remaining_nodes=0
    )
    run.refresh_from_db()
    return dag, run


def _state(run, node_id) -> DagNodeState:
    return DagNodeState.objects.get(run=run, node_id=node_id)


def _fail_again(run, node_id: str) -> None:
    """What the engine leaves when the node's new attempt fails and the run ends."""
    now = timezone.now()
    DagNodeState.objects.filter(run=run, node_id=node_id).update(
        status="failed", started_at=now, completed_at=now, error_message="again"
    )
    DagRun.platform.filter(id=run.id).update(status="failed", completed_at=now)


def test_a_rerun_keeps_each_reset_nodes_attempt_and_numbers_the_next(ended_run):
    _, run = ended_run
    before_b, before_c = _state(run, "b"), _state(run, "c")
    dag_run_rerun(run=run, triggered_by="user:alice")
    kept = {a.node_id: a for a in DagNodeAttempt.objects.filter(run=run)}
    assert set(kept) == {"b", "c"}  # the succeeded and the skipped nodes were not re-run
    b = kept["b"]
    assert (b.number, b.trigger, b.triggered_by, b.status) == (1, "run", "", "failed")
    assert b.execution_id == before_b.execution_id
    assert (b.started_at, b.completed_at) == (before_b.started_at, before_b.completed_at)
    assert b.error_message == "ValueError: boom" and b.execution_attempts == 1
    assert (kept["c"].status, kept["c"].started_at) == ("upstream_failed", None)
    assert before_c.execution_id is None
    now_b = _state(run, "b")
    assert (now_b.attempt_number, now_b.attempt_trigger, now_b.attempt_triggered_by) == (
        2,
        "rerun",
        "user:alice",
    )
    assert now_b.execution_id != before_b.execution_id  # the new attempt's own execution
    # The earlier attempt's execution is still there, linked from its attempt row.
    assert TaskExecution.platform.filter(id=before_b.execution_id, status="failed").exists()
    assert _state(run, "a").attempt_number == 1


def test_a_second_rerun_keeps_both_earlier_attempts(ended_run):
    _, run = ended_run
    dag_run_rerun(run=run, triggered_by="user:alice")
    second = _state(run, "b").execution_id
    _fail_again(run, "b")
    dag_run_rerun(run=run, triggered_by="apikey:ci")
    attempts = list(
        DagNodeAttempt.objects.filter(run=run, node_id="b").values_list(
            "number", "trigger", "triggered_by", "execution_id", "error_message"
        )
    )
    assert attempts[0][:3] == (1, "run", "")
    assert attempts[1] == (2, "rerun", "user:alice", second, "again")
    assert _state(run, "b").attempt_number == 3
    assert _state(run, "b").attempt_triggered_by == "apikey:ci"


def test_a_dead_letter_retried_inside_its_run_keeps_the_attempt_it_replaces(ended_run):
    _, run = ended_run
    failed = TaskExecution.platform.get(id=_state(run, "b").execution_id)
    TaskExecution.platform.filter(id=failed.id).update(dead_lettered=True)
    link = DagNodeExecution.objects.get(execution_root_id=failed.id)
    assert dag_node_dead_letter_retry(execution=failed, link=link, triggered_by="user:bob")
    [kept] = DagNodeAttempt.objects.filter(run=run, node_id="b")
    assert (kept.number, kept.status, kept.execution_id) == (1, "failed", failed.id)
    state = _state(run, "b")
    assert (state.attempt_number, state.attempt_trigger, state.attempt_triggered_by) == (
        2,
        "dead_letter_retry",
        "user:bob",
    )


def test_the_api_run_detail_lists_every_attempt_with_its_execution(api, ended_run):
    dag, run = ended_run
    first = _state(run, "b").execution_id
    retried = api.post(f"/api/v1/dags/{dag.id}/executions/{run.id}/retry")
    assert retried.status_code == 202, retried.content
    body = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").json()
    nodes = {node["node_id"]: node for node in body["nodes"]}
    b = nodes["b"]
    assert (b["attempt_number"], b["attempt_trigger"]) == (2, "rerun")
    assert b["attempt_triggered_by"].startswith("user:")
    assert [h["attempt"] for h in b["history"]] == [1, 2]
    earlier, current = b["history"]
    assert earlier == {
        "attempt": 1,
        "current": False,
        "trigger": "run",
        "triggered_by": "",
        "status": "failed",
        "execution_id": str(first),
        "execution_status": "failed",
        "execution_attempts": 1,
        "last_execution_id": str(first),
        "started_at": earlier["started_at"],
        "completed_at": earlier["completed_at"],
        "error_message": "ValueError: boom",
        "map_total": None,
        "shard_executions": [],
    }
    assert earlier["started_at"].endswith("Z") and earlier["completed_at"]
    assert current["current"] and current["execution_id"] == str(_state(run, "b").execution_id)
    assert current["triggered_by"] == b["attempt_triggered_by"]
    # A node that was never re-run has its one attempt.
    assert [h["attempt"] for h in nodes["a"]["history"]] == [1]
    assert retried.json()["nodes"][1]["history"][0]["status"] == "failed"


def test_another_tenants_run_history_is_not_found(api, tenant_factory):
    other, _ = tenant_factory("globex")
    dag = make_dag(other)
    run = make_dag_run(dag, ENDED)
    assert api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").status_code == 404


def test_an_earlier_attempts_executions_keep_their_node_shards_included(ended_run):
    """The re-run drops the engine's links of the node (they are the current attempt's); the
    earlier attempt's chain and its fan-out shards are still named by their run and node."""
    _, run = ended_run
    b = _state(run, "b")
    shard_roots = [
        TaskExecution.objects.create(
            tenant_id=run.tenant_id,
            task_id=TaskExecution.platform.get(id=b.execution_id).task_id,
            trigger="dag",
            status="failed",
            scheduled_at=timezone.now(),
            attempt=1,
        ).id
        for _ in range(2)
    ]
    for index, root in enumerate(shard_roots):
        DagNodeExecution.objects.create(
            execution_root_id=root, run=run, node_id="b", shard_index=index
        )
    dag_run_rerun(run=run)
    [attempt] = DagNodeAttempt.objects.filter(run=run, node_id="b")
    moved = {
        row.execution_root_id: (row.node_id, row.shard_index, row.run_id)
        for row in DagNodeAttemptExecution.objects.filter(attempt=attempt)
    }
    assert moved == {
        b.execution_id: ("b", None, run.id),
        shard_roots[0]: ("b", 0, run.id),
        shard_roots[1]: ("b", 1, run.id),
    }
    assert not DagNodeExecution.objects.filter(execution_root_id__in=list(moved)).exists()
    from dags.attempt_selectors import dag_run_node_attempts

    nodes = list(DagNodeState.objects.filter(run=run))
    earlier = dag_run_node_attempts(run=run, nodes=nodes)["b"][0]
    assert earlier.shard_executions == [(0, shard_roots[0]), (1, shard_roots[1])]


def test_the_dead_letter_of_an_earlier_attempt_is_retried_inside_its_run(ended_run):
    """b's first attempt was dead-lettered, the run re-run by hand and b failed again: the
    old dead letter is still b's, and its retry re-runs b in its run (not a lone task run)."""
    from runs.dead_letters import dead_letter_retry

    _, run = ended_run
    first = TaskExecution.platform.get(id=_state(run, "b").execution_id)
    TaskExecution.platform.filter(id=first.id).update(dead_lettered=True)
    dag_run_rerun(run=run, triggered_by="user:alice")
    _fail_again(run, "b")
    first.refresh_from_db()
    retry = dead_letter_retry(execution=first, triggered_by="apikey:ops")
    state = _state(run, "b")
    assert retry is not None and retry.id == state.execution_id
    assert DagNodeExecution.objects.get(execution_root_id=retry.id).run_id == run.id
    assert (state.attempt_number, state.attempt_trigger, state.attempt_triggered_by) == (
        3,
        "dead_letter_retry",
        "apikey:ops",
    )
    assert not TaskExecution.platform.filter(id=first.id, dead_lettered=True).exists()
