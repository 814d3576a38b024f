"""Dashboard pages through Django's test client: rendering, tenant walls, roles, buttons."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler_app.choices import Role
from scheduler_app.models import TaskExecution, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def test_anonymous_is_sent_to_login():
    response = Client().get("/dashboard/")
    assert response.status_code == 302
    assert response["Location"].startswith("/dashboard/login/")


@pytest.mark.parametrize("fragment", ["", "?fragment=1"])
def test_every_page_renders(signed_in, busy_task, fragment):
    dead = TaskExecution.platform.get(task=busy_task, dead_lettered=True)
    for url in (
        "/dashboard/",
        f"/dashboard/tasks/{busy_task.id}",
        f"/dashboard/executions/{dead.id}",
        "/dashboard/workers",
        "/dashboard/dlq",
        "/dashboard/missed",
        "/dashboard/sizing",
    ):
        response = signed_in.get(url + fragment)
        assert response.status_code == 200, (url, response.content[:500])


def test_task_page_shows_failure_breakdown_attempts_and_next_fires(signed_in, busy_task):
    page = signed_in.get(f"/dashboard/tasks/{busy_task.id}").content.decode()
    assert "http_5xx" in page and "timeout" in page
    assert page.count("UTC ·") == 5  # five upcoming fire times
    dead = TaskExecution.platform.get(task=busy_task, dead_lettered=True)
    page = signed_in.get(f"/dashboard/executions/{dead.id}").content.decode()
    attempts = page.split('id="attempts"')[1].split("</table>")[0]
    assert attempts.count('href="/dashboard/executions/') == 3  # the three attempts of the fire


def test_another_tenants_task_is_not_found(signed_in, tenant_factory):
    other, _ = tenant_factory("globex")
    foreign = make_task(other, name="theirs")
    assert signed_in.get(f"/dashboard/tasks/{foreign.id}").status_code == 404
    assert signed_in.post(f"/dashboard/tasks/{foreign.id}/pause").status_code == 404
    foreign.refresh_from_db()
    assert foreign.paused is False


def test_pause_resume_and_trigger_buttons_call_the_services(signed_in, tenant):
    task = make_task(tenant, name="buttons")
    signed_in.post(f"/dashboard/tasks/{task.id}/pause")
    task.refresh_from_db()
    assert task.paused and task.next_fire_at is None
    signed_in.post(f"/dashboard/tasks/{task.id}/resume")
    task.refresh_from_db()
    assert not task.paused and task.next_fire_at is not None
    signed_in.post(f"/dashboard/tasks/{task.id}/trigger")
    assert TaskExecution.platform.filter(task=task, trigger="manual").count() == 1


def test_viewer_cannot_press_buttons(tenant_and_user, tenant):
    _tenant_obj, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    client = Client()
    client.login(username=user.username, password="pw-123456")
    task = make_task(tenant, name="read-only")
    assert client.post(f"/dashboard/tasks/{task.id}/pause").status_code == 403
    assert "btn-pause" not in client.get(f"/dashboard/tasks/{task.id}").content.decode()


def test_dead_letter_retry_and_delete(signed_in, busy_task):
    dead = TaskExecution.platform.get(task=busy_task, dead_lettered=True)
    signed_in.post(f"/dashboard/dlq/{dead.id}/retry")
    assert not TaskExecution.platform.filter(task=busy_task, dead_lettered=True).exists()
    assert TaskExecution.platform.filter(retry_of_id=dead.id, attempt=1).exists()
    TaskExecution.platform.filter(id=dead.id).update(dead_lettered=True)
    signed_in.post(f"/dashboard/dlq/{dead.id}/delete")
    assert not TaskExecution.platform.filter(task=busy_task, dead_lettered=True).exists()


def test_cancel_button_cancels_a_waiting_run_before_it_starts(signed_in, tenant):
    from scheduler_app.services.task_definitions import task_trigger

    task = make_task(tenant, name="cancel-me", schedule={"type": "manual"})
    execution = task_trigger(task=task)
    page = signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    assert "execution-cancel" in page
    response = signed_in.post(f"/dashboard/executions/{execution.id}/cancel")
    assert response.status_code == 302
    execution.refresh_from_db()
    assert execution.status == "cancelled" and execution.started_at is None
    # An ended run has no button, and a second cancel changes nothing.
    assert (
        "execution-cancel"
        not in signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    )
    signed_in.post(f"/dashboard/executions/{execution.id}/cancel")
    execution.refresh_from_db()
    assert execution.status == "cancelled"
