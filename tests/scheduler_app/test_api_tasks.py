"""The REST API's first slice: tasks, executions, logs, DLQ, with JWT and tenant scoping."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from runs.finish import run_finish
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from tests.factories import make_task

pytestmark = pytest.mark.django_db

DESIGN_DOC_TASK = {
    "name": "daily-etl-pipeline",
    "description": "Extract, transform, and load daily sales data",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "America/New_York"},
    "handler": {
        "type": "shell",
        "command": ["python3", "etl.py", "--source=sales-db"],
        "environment": {"LOG_LEVEL": "Information"},
    },
    "timeout_seconds": 3600,
    "retry_policy": {
        "max_attempts": 3,
        "backoff": "exponential_jitter",
        "base_delay_seconds": 60,
        "max_delay_seconds": 3600,
    },
    "priority": 2,
    "parameters": {"region": "eu"},
    "notifications": {"on_failure": ["email://oncall@example.com"], "on_success": [], "on_dlq": []},
    "tags": ["etl", "sales", "daily"],
}


def create(api, **overrides):
    return api.post("/api/v1/tasks", {**DESIGN_DOC_TASK, **overrides}, format="json")


def test_requests_without_a_token_are_refused():
    assert APIClient().get("/api/v1/tasks").status_code == 401


def test_create_accepts_the_design_document_shape(api):
    response = create(api)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "daily-etl-pipeline"
    assert body["schedule"] == {
        "type": "cron",
        "expression": "0 2 * * *",
        "timezone": "America/New_York",
    }
    assert body["retry_policy"]["backoff"] == "exponential_jitter"
    assert body["priority"] == 2 and body["tags"] == ["etl", "sales", "daily"]
    assert body["next_fire_at"] is not None
    task = TaskDefinition.platform.get(id=body["id"])
    assert task.handler_type == "shell" and task.handler_config["command"][0] == "python3"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"schedule": {"type": "cron", "expression": "61 * * * *"}}, "schedule.expression"),
        (
            {"schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Mars/Olympus"}},
            "schedule.timezone",
        ),
        ({"schedule": {"type": "weekly"}}, "schedule.type"),
        ({"schedule": {"type": "interval", "expression": "0s"}}, "schedule.expression"),
        ({"schedule": {"type": "once"}}, "schedule.run_at"),
        ({"handler": {"type": "ftp"}}, "handler.type"),
        ({"handler": {"type": "python", "callable": "no-such-handler"}}, "handler.callable"),
        ({"handler": {"type": "shell", "command": "rm -rf /"}}, "handler.command"),
        ({"handler": {"type": "container", "command": ["run"]}}, "handler.image"),
        ({"priority": 11}, "priority"),
        ({"retry_policy": {"backoff": "quadratic"}}, "retry_policy.backoff"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(api, overrides, field):
    response = create(api, **overrides)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["field"] == field, body
    assert field in body["errors"] and body["message"]
    assert TaskDefinition.platform.count() == 0


def test_a_timeout_beyond_the_installation_limit_is_a_400_naming_the_limit(api, settings):
    settings.SCHEDULER_MAX_TASK_TIMEOUT = 7000
    response = create(api, timeout_seconds=7001)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "timeout_seconds"
    assert "7000" in response.json()["message"]
    assert TaskDefinition.platform.count() == 0
    assert create(api, timeout_seconds=7000).status_code == 201


def test_a_container_task_without_a_capable_worker_is_saved_with_a_warning(api):
    # No live worker offers `container` here: the task is saved, and the answer says why
    # its runs will wait.
    response = create(api, handler={"type": "container", "image": "etl:v2", "command": ["run"]})
    assert response.status_code == 201, response.content
    assert any("'container'" in warning for warning in response.json()["warnings"])


def test_malformed_json_is_a_400(api):
    response = api.generic("POST", "/api/v1/tasks", "{not json", content_type="application/json")
    assert response.status_code == 400


def test_a_duplicate_name_is_a_409(api):
    assert create(api).status_code == 201
    response = create(api)
    assert response.status_code == 409 and response.json()["field"] == "name"


def test_list_get_update_and_soft_delete(api):
    task_id = create(api).json()["id"]
    assert [t["id"] for t in api.get("/api/v1/tasks").json()["results"]] == [task_id]
    assert api.get(f"/api/v1/tasks/{task_id}").json()["name"] == "daily-etl-pipeline"

    updated = api.put(
        f"/api/v1/tasks/{task_id}",
        {**DESIGN_DOC_TASK, "schedule": {"type": "interval", "expression": "5m"}},
        format="json",
    )
    assert updated.status_code == 200, updated.content
    assert updated.json()["schedule"]["type"] == "interval"

    patched = api.patch(f"/api/v1/tasks/{task_id}", {"priority": 9}, format="json")
    assert patched.status_code == 200 and patched.json()["priority"] == 9

    assert api.delete(f"/api/v1/tasks/{task_id}").status_code == 204
    assert api.get(f"/api/v1/tasks/{task_id}").status_code == 404
    assert TaskDefinition.platform.get(id=task_id).deleted_at is not None
    # The name is free again after a soft delete.
    assert create(api).status_code == 201


def test_pause_clears_the_next_fire_and_resume_recomputes_it_from_now(api):
    task_id = create(api).json()["id"]
    paused = api.post(f"/api/v1/tasks/{task_id}/pause").json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    resumed = api.post(f"/api/v1/tasks/{task_id}/resume").json()
    assert resumed["paused"] is False and resumed["next_fire_at"] is not None


def test_trigger_answers_202_with_the_execution_id(api):
    task_id = create(api).json()["id"]
    response = api.post(
        f"/api/v1/tasks/{task_id}/trigger", {"parameters": {"day": "mon"}}, format="json"
    )
    assert response.status_code == 202
    execution = TaskExecution.platform.get(id=response.json()["execution_id"])
    assert execution.trigger == "manual" and execution.status == "queued"
    assert execution.parameters == {"day": "mon"} and execution.queue == "critical"


def test_schedule_preview_gives_utc_and_local_times(api):
    task_id = create(
        api, schedule={"type": "cron", "expression": "0 3 * * *", "timezone": "America/New_York"}
    ).json()["id"]
    response = api.get(f"/api/v1/tasks/{task_id}/schedule-preview?count=5")
    assert response.status_code == 200
    fires = response.json()["fire_times"]
    assert len(fires) == 5
    assert all(f["utc"].endswith("Z") for f in fires)
    assert all("T03:00:00-0" in f["local"] for f in fires)
    assert api.get(f"/api/v1/tasks/{task_id}/schedule-preview?count=1001").status_code == 400
    assert api.get(f"/api/v1/tasks/{task_id}/schedule-preview?count=abc").status_code == 400


def test_executions_detail_logs_and_dead_letter_queue(api, tenant):
    task = make_task(tenant, schedule={"type": "manual"}, retry_policy={"max_attempts": 1})
    trigger = api.post(f"/api/v1/tasks/{task.id}/trigger").json()
    execution_id = trigger["execution_id"]
    claim = execution_claim(execution_id=execution_id, worker_id="w1", lease_seconds=30)
    run_finish(
        execution_id=execution_id,
        claim_token=claim.claim_token,
        outcome=Outcome(status="failed", error_message="exit 3", error_class="exit_code"),
        log_text="2027-01-01T00:00:00Z [stdout] hello\n",
    )
    listing = api.get(f"/api/v1/tasks/{task.id}/executions").json()
    assert [e["id"] for e in listing["results"]] == [execution_id]
    detail = api.get(f"/api/v1/executions/{execution_id}").json()
    assert detail["status"] == "failed" and detail["dead_lettered"] is True
    logs = api.get(f"/api/v1/executions/{execution_id}/logs").json()
    assert logs["lines"] == ["2027-01-01T00:00:00Z [stdout] hello"]
    text = api.get(f"/api/v1/executions/{execution_id}/logs?format=text")
    assert text.content.decode() == "2027-01-01T00:00:00Z [stdout] hello\n"
    dlq = api.get("/api/v1/admin/dlq").json()
    assert [e["id"] for e in dlq["results"]] == [execution_id]

    retried = api.post(f"/api/v1/admin/dlq/{execution_id}/retry")
    assert retried.status_code == 202
    assert api.post(f"/api/v1/admin/dlq/{execution_id}/retry").status_code == 404
    assert api.get("/api/v1/admin/dlq").json()["results"] == []
    assert ExecutionLog.platform.filter(execution_id=execution_id).exists()


def test_dead_letter_delete_and_retry_all(api, tenant):
    task = make_task(tenant, schedule={"type": "manual"}, retry_policy={"max_attempts": 1})
    ids = []
    for _ in range(3):
        execution_id = api.post(f"/api/v1/tasks/{task.id}/trigger").json()["execution_id"]
        claim = execution_claim(execution_id=execution_id, worker_id="w1", lease_seconds=30)
        run_finish(
            execution_id=execution_id,
            claim_token=claim.claim_token,
            outcome=Outcome(status="failed"),
        )
        ids.append(execution_id)
    assert api.delete(f"/api/v1/admin/dlq/{ids[0]}").status_code == 204
    answer = api.post("/api/v1/admin/dlq/retry-all").json()
    assert answer["retried"] == 2
    assert sorted(item["execution_id"] for item in answer["results"]) == sorted(ids[1:])
    assert {item["outcome"] for item in answer["results"]} == {"retried"}
    assert api.get("/api/v1/admin/dlq").json()["results"] == []


def test_another_tenants_ids_answer_404_everywhere(api, tenant_factory):
    other_tenant, _ = tenant_factory("globex")
    theirs = make_task(other_tenant, name="their-task")
    execution = TaskExecution.objects.create(
        tenant=other_tenant, task=theirs, scheduled_at=theirs.created_at, dead_lettered=True
    )
    for method, url in [
        ("get", f"/api/v1/tasks/{theirs.id}"),
        ("put", f"/api/v1/tasks/{theirs.id}"),
        ("patch", f"/api/v1/tasks/{theirs.id}"),
        ("delete", f"/api/v1/tasks/{theirs.id}"),
        ("post", f"/api/v1/tasks/{theirs.id}/trigger"),
        ("post", f"/api/v1/tasks/{theirs.id}/pause"),
        ("post", f"/api/v1/tasks/{theirs.id}/resume"),
        ("get", f"/api/v1/tasks/{theirs.id}/executions"),
        ("get", f"/api/v1/tasks/{theirs.id}/schedule-preview"),
        ("get", f"/api/v1/executions/{execution.id}"),
        ("get", f"/api/v1/executions/{execution.id}/logs"),
        ("delete", f"/api/v1/admin/dlq/{execution.id}"),
        ("post", f"/api/v1/admin/dlq/{execution.id}/retry"),
        ("get", f"/api/v1/tasks/{uuid.uuid4()}"),
        ("get", "/api/v1/tasks/not-a-uuid"),
    ]:
        response = getattr(api, method)(url, DESIGN_DOC_TASK, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
    assert api.get("/api/v1/tasks").json()["results"] == []
    assert api.get("/api/v1/admin/dlq").json()["results"] == []
    theirs.refresh_from_db()
    assert theirs.deleted_at is None and not theirs.paused
