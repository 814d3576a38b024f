"""The admin's list pages fit a 1366 px screen (short ids, chosen columns, times to the
second) and the task change form has Trigger / Pause / Resume (not for a DAG node's task)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from scheduler_app.choices import DAG_NODE_TAG, ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution
from tests.dashboard.conftest import add_execution, make_dag
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_execution_list_shows_short_ids_and_times_to_the_second(staff_client, tenant):
    task = make_task(tenant, name="listed")
    execution = add_execution(task, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    page = staff_client.get(reverse("admin:scheduler_app_taskexecution_changelist")).content
    page = page.decode()
    assert f">{str(execution.id)[:8]}</a>" in page
    assert execution.scheduled_at.strftime("%Y-%m-%d %H:%M:%S") in page
    assert "1/3" in page


def test_task_change_form_buttons_trigger_and_pause(staff_client, tenant):
    task = make_task(tenant, name="buttons", schedule={"type": "manual"})
    url = reverse("admin:scheduler_app_taskdefinition_change", args=[task.pk])
    page = staff_client.get(url).content.decode()
    assert 'id="admin-trigger"' in page and 'id="admin-pause"' in page
    trigger = reverse("admin:scheduler_app_taskdefinition_button", args=[task.pk, "trigger"])
    assert staff_client.post(trigger).status_code == 302
    assert TaskExecution.platform.filter(task=task, trigger="manual").count() == 1
    assert staff_client.get(trigger).status_code == 404  # a GET changes nothing
    pause = reverse("admin:scheduler_app_taskdefinition_button", args=[task.pk, "pause"])
    assert staff_client.post(pause).status_code == 302
    task.refresh_from_db()
    assert task.paused


def test_a_dag_nodes_task_has_no_buttons_on_its_change_form(staff_client, tenant):
    make_dag(tenant)
    hidden = TaskDefinition.platform.filter(tenant=tenant, tags__contains=[DAG_NODE_TAG]).first()
    url = reverse("admin:scheduler_app_taskdefinition_change", args=[hidden.pk])
    assert 'id="admin-trigger"' not in staff_client.get(url).content.decode()
    trigger = reverse("admin:scheduler_app_taskdefinition_button", args=[hidden.pk, "trigger"])
    assert staff_client.post(trigger).status_code == 403
    assert not TaskExecution.platform.filter(task=hidden).exists()
