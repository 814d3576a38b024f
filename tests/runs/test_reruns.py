"""Re-running an ended run with the same or edited parameters: a new run (trigger `rerun`,
its own chain, `rerun_of` the original), validated, size-capped and charged as a manual
trigger is; a run that has not ended, or a DAG node's, is refused and nothing is created. The
API's walls are played by a viewer and by another tenant (real PostgreSQL)."""

from __future__ import annotations

import pytest

from runs.reruns import execution_rerun
from scheduler_app.choices import ExecutionStatus
from scheduler_app.errors import Conflict
from scheduler_app.models import AuditEntry, TaskExecution
from tests.api_clients import member_client
from tests.dashboard.conftest import ENDED_RUN_STATES, add_execution, make_dag, make_dag_run
from tests.factories import make_task

pytestmark = pytest.mark.django_db

ENDED = [
    ExecutionStatus.SUCCESS,
    ExecutionStatus.FAILED,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.TIMED_OUT,
]


@pytest.fixture
def task(tenant):
    return make_task(tenant, name="nightly-report")


def _ended(task, status=ExecutionStatus.FAILED, **kwargs):
    execution = add_execution(task, minutes_ago=3, status=status, **kwargs)
    TaskExecution.platform.filter(id=execution.id).update(parameters={"day": "2026-12-01"})
    execution.refresh_from_db()
    return execution


def _reruns_of(execution) -> list[TaskExecution]:
    return list(TaskExecution.platform.filter(retry_of_id=execution.id, trigger="rerun"))


@pytest.mark.parametrize("status", ENDED)
def test_any_ended_run_reruns_as_a_new_run_with_its_parameters(task, status):
    original = _ended(task, status)
    rerun = execution_rerun(execution=original, note="again", actor="user:alice")
    assert (rerun.trigger, rerun.status, rerun.attempt) == ("rerun", "queued", 1)
    assert rerun.retry_of_id == original.id and rerun.root_execution_id == rerun.id
    assert rerun.parameters == {"day": "2026-12-01"}
    assert rerun.max_attempts == task.max_attempts
    entry = AuditEntry.platform.get(action="execution.rerun", object_id=str(original.id))
    assert entry.detail["rerun_id"] == str(rerun.id) and entry.detail["reason"] == "again"
    assert entry.detail["parameters_edited"] is False and entry.actor == "user:alice"


def test_a_dead_lettered_run_reruns_too(task):
    original = _ended(task, dead_lettered=True)
    rerun = execution_rerun(execution=original, parameters={"day": "2026-12-02"})
    assert rerun.parameters == {"day": "2026-12-02"}
    # The re-run does not answer the dead letter: that stays for the queue to decide.
    assert TaskExecution.platform.get(id=original.id).dead_lettered is True


@pytest.mark.parametrize("status", [ExecutionStatus.QUEUED, ExecutionStatus.RUNNING])
def test_a_run_that_has_not_ended_cannot_be_rerun(task, status):
    original = add_execution(task, minutes_ago=0, status=status)
    with pytest.raises(Conflict, match=f"still {status}"):
        execution_rerun(execution=original)
    assert _reruns_of(original) == []


def test_a_dag_nodes_run_points_to_clearing_the_node(tenant):
    run = make_dag_run(make_dag(tenant), ENDED_RUN_STATES)
    node_run = TaskExecution.platform.get(id=run.nodes.get(node_id="b").execution_id)
    with pytest.raises(Conflict, match="clear the node"):
        execution_rerun(execution=node_run)
    assert _reruns_of(node_run) == []


def test_the_api_reruns_with_edited_parameters_and_lists_the_link(api, task):
    original = _ended(task)
    response = api.post(
        f"/api/v1/executions/{original.id}/rerun",
        {"parameters": {"day": "2026-12-03", "force": True}, "note": "fixed upstream"},
        format="json",
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["rerun_of"] == str(original.id) and body["status"] == "queued"
    assert body["parameters"] == {"day": "2026-12-03", "force": True}
    detail = api.get(f"/api/v1/executions/{body['execution_id']}").json()
    assert (detail["trigger"], detail["rerun_of"]) == ("rerun", str(original.id))
    assert api.get(f"/api/v1/executions/{original.id}").json()["rerun_of"] is None
    entry = AuditEntry.platform.get(action="execution.rerun")
    assert entry.detail["reason"] == "fixed upstream" and entry.detail["parameters_edited"] is True
    # No body: the run's own parameters.
    same = api.post(f"/api/v1/executions/{original.id}/rerun", format="json")
    assert same.status_code == 202 and same.json()["parameters"] == {"day": "2026-12-01"}


def test_an_idempotency_key_reruns_once(api, task):
    original = _ended(task)
    url = f"/api/v1/executions/{original.id}/rerun"
    first = api.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="click-1")
    again = api.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="click-1")
    assert first.status_code == again.status_code == 202
    assert first.json()["execution_id"] == again.json()["execution_id"]
    assert len(_reruns_of(original)) == 1
    other = api.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="click-2")
    assert other.json()["execution_id"] != first.json()["execution_id"]
    assert len(_reruns_of(original)) == 2


def test_a_running_run_is_a_409_with_a_clear_message(api, task):
    running = add_execution(task, minutes_ago=0, status=ExecutionStatus.RUNNING)
    response = api.post(f"/api/v1/executions/{running.id}/rerun", {}, format="json")
    assert response.status_code == 409
    assert "still running" in response.json()["message"]
    assert _reruns_of(running) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"parameters": ["not", "an", "object"]}, "parameters"),
        ({"parameters": {"token": "{{secret:db-password}}"}}, "parameters"),
        ({"parameters": {}, "colour": "red"}, "colour"),
        ({"note": "x" * 2001}, "note"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(api, task, body, field):
    original = _ended(task)
    response = api.post(f"/api/v1/executions/{original.id}/rerun", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.content.decode()
    assert _reruns_of(original) == []


def test_oversize_parameters_are_a_413_as_for_a_trigger(api, task, settings):
    settings.PAYLOADS = {**settings.PAYLOADS, "MAX_BYTES": 64}
    original = _ended(task)
    response = api.post(
        f"/api/v1/executions/{original.id}/rerun",
        {"parameters": {"blob": "x" * 200}},
        format="json",
    )
    assert response.status_code == 413, response.content
    assert "parameters" in response.content.decode()
    assert _reruns_of(original) == []


def test_a_viewer_cannot_rerun(tenant, task):
    original = _ended(task)
    viewer, _ = member_client(tenant, "viewer")
    response = viewer.post(f"/api/v1/executions/{original.id}/rerun", {}, format="json")
    assert response.status_code == 403
    assert _reruns_of(original) == []
    assert not AuditEntry.platform.filter(action="execution.rerun").exists()


def test_another_tenant_cannot_find_the_run(tenant_factory, task):
    original = _ended(task)
    other, _ = tenant_factory("globex")
    intruder, _ = member_client(other, "admin")
    response = intruder.post(f"/api/v1/executions/{original.id}/rerun", {}, format="json")
    assert response.status_code == 404
    assert "2026-12-01" not in response.content.decode()
    assert _reruns_of(original) == []
