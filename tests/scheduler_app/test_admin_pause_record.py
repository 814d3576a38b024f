"""The Django admin and the pause record: a pause from the admin (list action, the change
form's button with its note) records the admin user; the lists say who paused; the detail
pages show the record read-only, so posting it changes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from scheduler_app.services.task_definitions import task_pause
from tests.factories import make_task

pytestmark = pytest.mark.django_db

PIPELINE = {
    "dag": "pipeline",
    "schedule": {"type": "cron", "expression": "0 3 * * *"},
    "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
}


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_the_change_forms_pause_button_records_the_admin_and_the_note(staff_client, tenant):
    task = make_task(tenant, name="nightly")
    change = reverse("admin:scheduler_app_taskdefinition_change", args=[task.id])
    form = staff_client.get(change).content.decode()
    assert 'name="note" id="admin-pause-note"' in form
    button = reverse("admin:scheduler_app_taskdefinition_button", args=[task.id, "pause"])
    assert staff_client.post(button, {"note": "vendor outage"}).status_code == 302
    task.refresh_from_db()
    assert (task.paused, task.paused_by, task.pause_note) == (True, "user:root", "vendor outage")
    page = staff_client.get(change).content.decode()
    assert "vendor outage" in page and "user:root" in page
    # Read-only on the form: no input carries the record, so a save cannot rewrite it.
    assert 'name="pause_note"' not in page and 'name="paused_by"' not in page
    listed = staff_client.get(reverse("admin:scheduler_app_taskdefinition_changelist"))
    assert "paused by user:root" in listed.content.decode()


def test_the_list_action_records_the_admin(staff_client, tenant):
    task = make_task(tenant, name="nightly")
    staff_client.post(
        reverse("admin:scheduler_app_taskdefinition_changelist"),
        {"action": "pause", "_selected_action": [str(task.id)]},
    )
    task.refresh_from_db()
    assert task.paused and task.paused_by == "user:root" and task.paused_at is not None


def test_a_paused_task_listed_says_the_runbook_paused_it(staff_client, tenant):
    task = make_task(tenant, name="flaky")
    task_pause(task=task, note="health check failed", paused_by="runbook")
    listed = staff_client.get(reverse("admin:scheduler_app_taskdefinition_changelist"))
    assert "paused by runbook" in listed.content.decode()
    assert TaskDefinition.platform.get(id=task.id).pause_note == "health check failed"


def test_dag_admin_pauses_with_the_admin_user_and_shows_the_record(staff_client, tenant):
    from dags.services.definitions import dag_create

    dag = dag_create(tenant=tenant, raw=PIPELINE)
    staff_client.post("/admin/dags/dag/", {"action": "pause", "_selected_action": [str(dag.id)]})
    dag.refresh_from_db()
    assert dag.paused and dag.paused_by == "user:root" and dag.pause_note == "from the admin"
    assert "user:root" in staff_client.get("/admin/dags/dag/").content.decode()
    detail = staff_client.get(f"/admin/dags/dag/{dag.id}/change/").content.decode()
    assert "from the admin" in detail and 'name="pause_note"' not in detail
    staff_client.post("/admin/dags/dag/", {"action": "resume", "_selected_action": [str(dag.id)]})
    dag.refresh_from_db()
    assert not dag.paused and dag.paused_by == "" and dag.next_fire_at is not None
    assert Dag.platform.count() == 1
