"""The Django admin: every model's pages render, and the operator actions go through services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from runs.finish import run_finish
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db

MODELS = ["tenant", "tenantmembership", "taskdefinition", "taskexecution", "executionlog"]


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_a_changelist_with_filters_and_search(staff_client, tenant, model):
    make_task(tenant)
    url = reverse(f"admin:scheduler_app_{model}_changelist")
    response = staff_client.get(url, {"q": "x"})
    assert response.status_code == 200


def test_task_detail_and_execution_detail_render(staff_client, tenant):
    task = make_task(tenant, schedule={"type": "manual"})
    execution = task_trigger(task=task)
    assert (
        staff_client.get(
            reverse("admin:scheduler_app_taskdefinition_change", args=[task.id])
        ).status_code
        == 200
    )
    assert (
        staff_client.get(
            reverse("admin:scheduler_app_taskexecution_change", args=[execution.id])
        ).status_code
        == 200
    )


def _action(staff_client, model, action, ids):
    return staff_client.post(
        reverse(f"admin:scheduler_app_{model}_changelist"),
        {"action": action, "_selected_action": [str(i) for i in ids]},
    )


def test_trigger_pause_and_resume_actions(staff_client, tenant):
    task = make_task(tenant)
    assert _action(staff_client, "taskdefinition", "trigger_now", [task.id]).status_code == 302
    assert TaskExecution.platform.filter(task=task, trigger="manual").count() == 1
    _action(staff_client, "taskdefinition", "pause", [task.id])
    task.refresh_from_db()
    assert task.paused and task.next_fire_at is None
    _action(staff_client, "taskdefinition", "resume", [task.id])
    task.refresh_from_db()
    assert not task.paused and task.next_fire_at is not None


def test_retry_dead_lettered_action(staff_client, tenant):
    task = make_task(tenant, schedule={"type": "manual"}, retry_policy={"max_attempts": 1})
    execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id, claim_token=claim.claim_token, outcome=Outcome(status="failed")
    )
    _action(staff_client, "taskexecution", "retry_dead_lettered", [execution.id])
    execution.refresh_from_db()
    assert not execution.dead_lettered
    retry = TaskExecution.platform.get(retry_of_id=execution.id)
    assert retry.status == "queued" and retry.attempt == 1


def test_creating_a_task_in_the_admin_validates_through_the_service(staff_client, tenant):
    response = staff_client.post(
        reverse("admin:scheduler_app_taskdefinition_add"),
        {
            "tenant": tenant.id,
            "name": "from-admin",
            "description": "",
            "schedule_type": "cron",
            "schedule_expression": "*/5 * * * *",
            "timezone": "Europe/Berlin",
            "handler_type": "python",
            "handler_config": '{"callable": "noop"}',
            "parameters": "{}",
            "timeout_seconds": 300,
            "max_attempts": 3,
            "backoff": "exponential",
            "base_delay_seconds": 10,
            "max_delay_seconds": 3600,
            "priority": 5,
            "enabled": "on",
            "tags": "[]",
            "notifications": "{}",
            "catchup": "latest",
            "overlap": "allow",
            "jitter_seconds": 0,
        },
    )
    assert response.status_code == 302, response.content[:2000]
    task = TaskDefinition.platform.get(name="from-admin")
    assert task.next_fire_at is not None and task.handler_config["type"] == "python"


def test_an_invalid_cron_in_the_admin_is_a_form_error_and_saves_nothing(staff_client, tenant):
    response = staff_client.post(
        reverse("admin:scheduler_app_taskdefinition_add"),
        {
            "tenant": tenant.id,
            "name": "bad",
            "schedule_type": "cron",
            "schedule_expression": "61 * * * *",
            "timezone": "UTC",
            "handler_type": "python",
            "handler_config": '{"callable": "noop"}',
            "parameters": "{}",
            "timeout_seconds": 300,
            "max_attempts": 3,
            "backoff": "exponential",
            "base_delay_seconds": 10,
            "max_delay_seconds": 3600,
            "priority": 5,
            "tags": "[]",
            "notifications": "{}",
        },
    )
    assert response.status_code == 200
    assert b"out of range" in response.content or b"minute" in response.content
    assert not TaskDefinition.platform.filter(name="bad").exists()


def test_the_admin_index_names_models_in_plain_english(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    for plural in ("Task stats", "Audit entries", "API keys"):
        assert f">{plural}<" in page, plural
    for wrong in ("Task statss", "Audit entrys", "Api keys"):
        assert wrong not in page
