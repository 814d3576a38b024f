"""A pause says who, when and why; the runbook's policy keys and the owner are validated and
read back. Bad input is a 400 naming the field and changes nothing; another tenant's
pause is a 404 and pauses nothing."""

from __future__ import annotations

import pytest

from alerting.models import NotificationChannel
from dags.models import Dag
from scheduler_app.models import TaskDefinition
from tests.api_clients import jwt_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db

TASK = {
    "name": "nightly-export",
    "schedule": {"type": "cron", "expression": "*/5 * * * *"},
    "handler": {"type": "python", "callable": "noop"},
}


def _task(api, **extra) -> dict:
    created = api.post("/api/v1/tasks", {**TASK, **extra}, format="json")
    assert created.status_code == 201, created.content
    return created.json()


def test_a_pause_records_who_when_and_the_note_and_a_resume_clears_them(api, tenant_and_user):
    _, user = tenant_and_user
    task = _task(api)
    paused = api.post(
        f"/api/v1/tasks/{task['id']}/pause", {"note": "warehouse migration"}, format="json"
    )
    assert paused.status_code == 200, paused.content
    body = paused.json()
    assert body["paused"] is True
    assert body["paused_by"] == f"user:{user.username}"
    assert body["pause_note"] == "warehouse migration"
    assert body["paused_at"] is not None and body["next_fire_at"] is None
    # A second pause keeps the first one's record.
    again = api.post(f"/api/v1/tasks/{task['id']}/pause", {"note": "other"}, format="json")
    assert again.json()["pause_note"] == "warehouse migration"
    resumed = api.post(f"/api/v1/tasks/{task['id']}/resume", format="json").json()
    assert (resumed["paused"], resumed["paused_by"], resumed["pause_note"]) == (False, "", "")
    assert resumed["paused_at"] is None and resumed["next_fire_at"] is not None
    # No body is a pause without a note.
    bare = api.post(f"/api/v1/tasks/{task['id']}/pause").json()
    assert (bare["paused"], bare["pause_note"]) == (True, "")


@pytest.mark.parametrize(
    ("body", "field"),
    [({"note": "x" * 2001}, "note"), ({"reason": "typo"}, "reason"), ({"note": None}, "note")],
)
def test_a_bad_pause_body_is_a_400_naming_the_field_and_pauses_nothing(api, body, field):
    task = _task(api)
    response = api.post(f"/api/v1/tasks/{task['id']}/pause", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert TaskDefinition.platform.get(id=task["id"]).paused is False


def test_a_dag_pause_records_the_note_and_who(api, tenant_and_user):
    _, user = tenant_and_user
    dag = api.post(
        "/api/v1/dags",
        {
            "dag": "nightly",
            "owner": "user:" + user.username,
            "schedule": {"type": "cron", "expression": "0 * * * *"},
            "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
        },
        format="json",
    )
    assert dag.status_code == 201, dag.content
    assert dag.json()["owner"] == f"user:{user.username}"
    dag_id = dag.json()["id"]
    paused = api.post(f"/api/v1/dags/{dag_id}/pause", {"note": "upstream down"}, format="json")
    assert paused.status_code == 200, paused.content
    assert (paused.json()["paused_by"], paused.json()["pause_note"]) == (
        f"user:{user.username}",
        "upstream down",
    )
    resumed = api.post(f"/api/v1/dags/{dag_id}/resume").json()
    assert (resumed["paused"], resumed["pause_note"], resumed["paused_at"]) == (False, "", None)
    refused = api.post(f"/api/v1/dags/{dag_id}/resume", {"note": "x"}, format="json")
    assert refused.status_code == 400 and Dag.platform.get(id=dag_id).paused is False


def test_another_tenants_pause_is_a_404_and_pauses_nothing(api, tenant_factory):
    victim_tenant, victim = tenant_factory("victim")
    task = make_task(victim_tenant, name="victim-task")
    response = api.post(f"/api/v1/tasks/{task.id}/pause", {"note": "gotcha"}, format="json")
    assert response.status_code == 404
    assert "victim-task" not in response.content.decode()
    task.refresh_from_db()
    assert (task.paused, task.pause_note, task.paused_by) == (False, "", "")
    # The victim's own view of it is unchanged.
    seen = jwt_client(victim).get(f"/api/v1/tasks/{task.id}").json()
    assert (seen["paused"], seen["pause_note"]) == (False, "")


def test_the_runbook_keys_and_the_owner_are_read_back(api, tenant):
    # The owner names a notification target of the tenant (checked when saved).
    NotificationChannel.objects.create(
        tenant=tenant, name="on-call", kind="webhook", target="https://hooks.example.com/x"
    )
    task = _task(
        api,
        owner="on-call",
        policy={
            "pause_after_failures": 3,
            "health_check": {"url": "https://status.example.com/health"},
            "remaining_runs": 12,
        },
    )
    assert task["owner"] == "on-call"
    assert task["policy"]["pause_after_failures"] == 3
    assert task["policy"]["remaining_runs"] == 12
    assert task["policy"]["health_check"] == {
        "url": "https://status.example.com/health",
        "expect_status": 200,
        "timeout_seconds": 5,
    }
    cleared = api.patch(
        f"/api/v1/tasks/{task['id']}",
        {"policy": {"pause_after_failures": None, "health_check": None}},
        format="json",
    ).json()
    assert (cleared["policy"]["pause_after_failures"], cleared["policy"]["health_check"]) == (
        None,
        None,
    )
    assert cleared["policy"]["remaining_runs"] == 12


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"pause_after_failures": -1}, "policy.pause_after_failures"),
        ({"pause_after_failures": 0}, "policy.pause_after_failures"),
        ({"remaining_runs": -3}, "policy.remaining_runs"),
        ({"health_check": {"url": "http://10.0.0.8/health"}}, "policy.health_check.url"),
        ({"health_check": {"url": "http://169.254.169.254/"}}, "policy.health_check.url"),
        ({"health_check": {"url": "http://localhost:8000/"}}, "policy.health_check.url"),
        ({"health_check": {"url": "ftp://example.com/"}}, "policy.health_check.url"),
        ({"health_check": {}}, "policy.health_check.url"),
        (
            {"health_check": {"url": "https://a.example", "expect_status": 99}},
            "policy.health_check.expect_status",
        ),
        (
            {"health_check": {"url": "https://a.example", "timeout_seconds": 600}},
            "policy.health_check.timeout_seconds",
        ),
        ({"health_check": {"url": "https://a.example", "verb": "POST"}}, "health_check"),
    ],
)
def test_bad_runbook_keys_are_a_400_naming_the_field_and_save_nothing(api, policy, field):
    response = api.post("/api/v1/tasks", {**TASK, "policy": policy}, format="json")
    assert response.status_code == 400, response.content
    fields = list(response.json()["errors"])
    assert any(field in name for name in fields), fields
    assert not TaskDefinition.platform.filter(name=TASK["name"]).exists()


def test_a_dag_with_a_private_health_check_is_refused(api):
    response = api.post(
        "/api/v1/dags",
        {
            "dag": "private-check",
            "policy": {"pause_after_failures": 2, "health_check": {"url": "http://127.0.0.1/"}},
            "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "policy.health_check.url" in str(response.json())
    assert not Dag.platform.filter(name="private-check").exists()
