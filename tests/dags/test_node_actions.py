"""Clearing and marking one node of an ended DAG run keeps the engine's counters right: the
cleared nodes run again in dependency order and a join runs once, after its last cleared
upstream; a node marked succeeded lets its downstream run once; a running run is refused and
left as it was. The engine is driven here without a worker (a finish is the engine call a
worker makes, its commit callbacks run), on real PostgreSQL. The API's role and tenant walls
are played by a viewer and by another tenant."""

from __future__ import annotations

import pytest
from django.db import transaction

from dags.engine.completion import node_complete, node_complete_locking
from dags.engine.state import run_lock
from dags.models import DagNodeAttempt, DagNodeExecution, DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.node_actions import dag_node_clear, dag_node_mark
from dags.services.runs import dag_trigger
from scheduler_app.errors import Conflict, NotFound
from scheduler_app.models import AuditEntry, TaskExecution
from tests.api_clients import member_client

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}
DIAMOND = {
    "dag": "diamond",
    "tasks": [
        {"id": "a", "handler": NOOP},
        {"id": "b", "handler": NOOP, "depends_on": ["a"]},
        {"id": "c", "handler": NOOP, "depends_on": ["a"]},
        {"id": "d", "handler": NOOP, "depends_on": ["b", "c"]},
    ],
}


@pytest.fixture
def diamond(tenant, django_capture_on_commit_callbacks):
    dag = dag_create(tenant=tenant, raw=DIAMOND)
    with django_capture_on_commit_callbacks(execute=True):
        run = dag_trigger(dag=dag)
    return dag, run


def _finish(run, node_id, status="success", *, callbacks):
    """What a worker's finish of the node's current execution does to the engine."""
    with callbacks(execute=True), transaction.atomic():
        if not node_complete_locking(
            run_id=run.id, version_id=run.version_id, node_id=node_id, status=status, result=None
        ):
            node_complete(run=run_lock(run.id), node_id=node_id, status=status, result=None)


def _states(run) -> dict[str, str]:
    return dict(DagNodeState.objects.filter(run=run).values_list("node_id", "status"))


def _run_status(run) -> str:
    return DagRun.platform.get(id=run.id).status


def _executions_of(run, node_id) -> int:
    """How many executions the node had in its run, over every attempt."""
    node_task = run.version.node_tasks[node_id]
    return TaskExecution.platform.filter(task_id=node_task, attempt=1).count()


def _run_to_end(run, statuses, callbacks):
    for node_id in ("a", "b", "c", "d"):
        if _states(run)[node_id] in ("queued", "pending"):
            _finish(run, node_id, statuses.get(node_id, "success"), callbacks=callbacks)


def test_clearing_a_middle_node_with_downstream_runs_the_join_once_after_it(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    assert _run_status(run) == "success"
    with django_capture_on_commit_callbacks(execute=True):
        cleared = dag_node_clear(
            run=run, node_id="b", downstream=True, note="bad input", actor="user:alice"
        )
    assert cleared == ["b", "d"]
    assert _run_status(run) == "running"
    states = _states(run)
    assert (states["a"], states["c"]) == ("success", "success")  # not touched
    assert states["b"] == "queued"  # its upstream is done: dispatched at once
    d = DagNodeState.objects.get(run=run, node_id="d")
    # d waits for b only (c's success still counts): one upstream left, one succeeded.
    assert (d.status, d.remaining_upstream, d.upstream_succeeded) == ("waiting", 1, 1)
    _finish(run, "b", callbacks=django_capture_on_commit_callbacks)
    assert _states(run)["d"] == "queued"
    _finish(run, "d", callbacks=django_capture_on_commit_callbacks)
    assert _run_status(run) == "success"
    # d ran twice in all: its first attempt and exactly one after the clear.
    assert _executions_of(run, "d") == 2
    assert _executions_of(run, "c") == 1
    assert DagNodeAttempt.objects.filter(run=run, node_id="d").count() == 1
    d = DagNodeState.objects.get(run=run, node_id="d")
    assert (d.attempt_number, d.attempt_trigger, d.attempt_triggered_by) == (
        2,
        "clear",
        "user:alice",
    )
    entry = AuditEntry.platform.get(action="dag_node.clear")
    assert entry.detail["reason"] == "bad input" and entry.detail["cleared"] == ["b", "d"]
    assert entry.actor == "user:alice" and entry.tenant_id == run.tenant_id


def test_clearing_a_node_alone_leaves_its_succeeded_downstream_alone(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert dag_node_clear(run=run, node_id="b") == ["b"]
    _finish(run, "b", callbacks=django_capture_on_commit_callbacks)
    assert _run_status(run) == "success"
    assert _executions_of(run, "d") == 1
    assert _executions_of(run, "b") == 2


def test_clearing_with_upstream_runs_from_the_root_in_order(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert dag_node_clear(run=run, node_id="d", upstream=True) == ["a", "b", "c", "d"]
    assert _states(run) == {"a": "queued", "b": "waiting", "c": "waiting", "d": "waiting"}
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    assert _states(run) == dict.fromkeys("abcd", "success")
    assert _run_status(run) == "success"
    assert {n: _executions_of(run, n) for n in "abcd"} == dict.fromkeys("abcd", 2)


def test_marking_a_failed_node_succeeded_lets_its_downstream_run_once(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {"b": "failed"}, django_capture_on_commit_callbacks)
    assert _states(run)["d"] == "upstream_failed"
    assert _run_status(run) in ("failed", "partially_completed")
    with django_capture_on_commit_callbacks(execute=True):
        reset = dag_node_mark(
            run=run, node_id="b", state="succeeded", note="fixed by hand", actor="user:bob"
        )
    assert reset == ["d"]
    b = DagNodeState.objects.get(run=run, node_id="b")
    assert (b.status, b.attempt_trigger, b.attempt_number) == ("success", "mark", 2)
    assert not DagNodeExecution.objects.filter(run=run, node_id="b").exists()
    assert _states(run)["d"] == "queued"
    _finish(run, "d", callbacks=django_capture_on_commit_callbacks)
    assert _run_status(run) == "success"
    assert _executions_of(run, "d") == 1  # never ran before (upstream_failed), once now
    assert _executions_of(run, "b") == 1  # marked, not run
    entry = AuditEntry.platform.get(action="dag_node.mark")
    assert entry.detail["reason"] == "fixed by hand" and entry.detail["state"] == "success"


def test_marking_a_leaf_ends_the_run_again_with_what_its_nodes_say(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert dag_node_mark(run=run, node_id="d", state="failed", note="wrong data") == []
    assert _run_status(run) == "partially_completed"
    d = DagNodeState.objects.get(run=run, node_id="d")
    assert (d.status, d.error_message) == ("failed", "marked failed: wrong data")


def test_marking_an_upstream_failed_propagates_the_failure_policy(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert dag_node_mark(run=run, node_id="b", state="failed") == ["d"]
    # skip_downstream (the default): d, whose upstream b now failed, is upstream_failed.
    assert _states(run)["d"] == "upstream_failed"
    assert _run_status(run) == "partially_completed"
    assert _executions_of(run, "d") == 1


def test_a_running_run_refuses_a_clear_and_a_mark_of_a_node_not_in_flight(diamond):
    _, run = diamond
    before = (_states(run), _run_status(run), DagNodeAttempt.objects.count())
    with pytest.raises(Conflict, match="still running"):
        dag_node_clear(run=run, node_id="a", downstream=True)
    with pytest.raises(Conflict, match="still running and node 'd' is waiting"):
        dag_node_mark(run=run, node_id="d", state="succeeded")  # not reached yet
    assert (_states(run), _run_status(run), DagNodeAttempt.objects.count()) == before
    assert not AuditEntry.platform.filter(action__startswith="dag_node.").exists()


def test_a_running_runs_in_flight_node_marked_succeeded_ends_so_and_its_run_goes_on(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _finish(run, "a", callbacks=django_capture_on_commit_callbacks)
    b_run = DagNodeState.objects.get(run=run, node_id="b").execution_id
    with django_capture_on_commit_callbacks(execute=True):
        assert dag_node_mark(run=run, node_id="b", state="succeeded", note="stuck, done") == []
    assert _states(run) == {"a": "success", "b": "success", "c": "queued", "d": "waiting"}
    # b's queued execution never starts; a late finish of it would find b ended.
    assert TaskExecution.platform.get(id=b_run).status == "cancelled"
    _finish(run, "b", callbacks=django_capture_on_commit_callbacks)  # the late finish
    d = DagNodeState.objects.get(run=run, node_id="d")
    assert (d.status, d.remaining_upstream) == ("waiting", 1)  # counted once, not twice
    _finish(run, "c", callbacks=django_capture_on_commit_callbacks)
    _finish(run, "d", callbacks=django_capture_on_commit_callbacks)
    assert _run_status(run) == "success"
    assert _executions_of(run, "d") == 1
    entry = AuditEntry.platform.get(action="dag_node.mark")
    assert entry.detail["while_running"] is True and entry.detail["was"] == "queued"


def test_a_running_runs_in_flight_node_marked_failed_follows_the_failure_policy(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _finish(run, "a", callbacks=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        dag_node_mark(run=run, node_id="c", state="failed", note="wrong region")
    c = DagNodeState.objects.get(run=run, node_id="c")
    assert (c.status, c.error_message) == ("failed", "marked failed: wrong region")
    _finish(run, "b", callbacks=django_capture_on_commit_callbacks)
    assert _states(run)["d"] == "upstream_failed"  # skip_downstream
    assert _run_status(run) == "partially_completed"
    assert _executions_of(run, "d") == 0


def test_an_unknown_node_and_a_mark_to_the_same_state_are_refused(
    diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with pytest.raises(NotFound):
        dag_node_clear(run=run, node_id="nope")
    with pytest.raises(Conflict, match="already success"):
        dag_node_mark(run=run, node_id="b", state="succeeded")
    assert _states(run) == dict.fromkeys("abcd", "success")


def test_the_api_clears_and_marks_under_the_dag_and_by_the_run_id(
    api, diamond, django_capture_on_commit_callbacks
):
    dag, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            f"/api/v1/dag-runs/{run.id}/nodes/c/clear",
            {"downstream": True, "note": "retry c"},
            format="json",
        )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["cleared"] == ["c", "d"] and body["status"] == "running"
    nodes = {node["node_id"]: node for node in body["nodes"]}
    assert nodes["c"]["status"] == "queued" and nodes["d"]["status"] == "waiting"
    # Still running: the second clear is a 409 naming why.
    again = api.post(f"/api/v1/dags/{dag.id}/executions/{run.id}/nodes/c/clear", {}, format="json")
    assert again.status_code == 409 and "still running" in again.json()["message"]
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        marked = api.post(
            f"/api/v1/dags/{dag.id}/executions/{run.id}/nodes/d/mark",
            {"state": "failed", "note": "bad report"},
            format="json",
        )
    assert marked.status_code == 202, marked.content
    assert marked.json()["status"] == "partially_completed"
    entry = AuditEntry.platform.get(action="dag_node.mark")
    assert entry.actor.startswith("user:") and entry.detail["reason"] == "bad report"


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(
    api, diamond, django_capture_on_commit_callbacks
):
    _, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    url = f"/api/v1/dag-runs/{run.id}/nodes/b"
    for path, body, field in [
        ("mark", {"state": "done"}, "state"),
        ("mark", {}, "state"),
        ("clear", {"downstream": "sideways"}, "downstream"),
        ("clear", {"upstream": True, "colour": "red"}, "colour"),
    ]:
        response = api.post(f"{url}/{path}", body, format="json")
        assert response.status_code == 400, (path, body, response.content)
        assert field in response.content.decode()
    assert api.post(f"{url}x/clear", {}, format="json").status_code == 404
    assert _states(run) == dict.fromkeys("abcd", "success")
    assert _run_status(run) == "success"


def test_a_viewer_cannot_clear_or_mark_and_nothing_changes(
    tenant, diamond, django_capture_on_commit_callbacks
):
    dag, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    viewer, _ = member_client(tenant, "viewer")
    for path, body in [
        ("clear", {"downstream": True}),
        ("mark", {"state": "failed", "note": "x"}),
    ]:
        for url in (
            f"/api/v1/dag-runs/{run.id}/nodes/b/{path}",
            f"/api/v1/dags/{dag.id}/executions/{run.id}/nodes/b/{path}",
        ):
            response = viewer.post(url, body, format="json")
            assert response.status_code == 403, response.content
    assert _states(run) == dict.fromkeys("abcd", "success")
    assert _run_status(run) == "success"
    assert not DagNodeAttempt.objects.filter(run=run).exists()
    assert not AuditEntry.platform.filter(action__startswith="dag_node.").exists()


def test_another_tenant_cannot_find_the_run_or_its_nodes(
    tenant_factory, diamond, django_capture_on_commit_callbacks
):
    dag, run = diamond
    _run_to_end(run, {}, django_capture_on_commit_callbacks)
    other, _ = tenant_factory("globex")
    intruder, _ = member_client(other, "admin")
    for url, body in [
        (f"/api/v1/dag-runs/{run.id}/nodes/b/clear", {}),
        (f"/api/v1/dag-runs/{run.id}/nodes/b/mark", {"state": "failed"}),
        (f"/api/v1/dags/{dag.id}/executions/{run.id}/nodes/b/clear", {}),
    ]:
        response = intruder.post(url, body, format="json")
        assert response.status_code == 404, response.content
        assert str(run.id) not in response.content.decode()
    assert _states(run) == dict.fromkeys("abcd", "success")
    assert not DagNodeAttempt.objects.filter(run=run).exists()
