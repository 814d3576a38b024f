"""The dashboard in a real browser: every view renders (screenshots in tests/artifacts/),
charts are drawn, the pause/resume/trigger and dead-letter buttons work, pages update live,
the task form edits a task."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model

from scheduler_app.choices import ExecutionStatus
from scheduler_app.fleet import registry
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.browser.conftest import screenshot, sign_in, wait_for_js
from tests.dashboard.conftest import add_execution
from tests.factories import make_task
from workers.fleet_membership import Fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("chromium")]


@pytest.fixture
def fast_dashboard(settings):
    settings.MONITORING = {
        **settings.MONITORING,
        "DASHBOARD_POLL_SECONDS": 0.5,
    }


@pytest.fixture
def history(transactional_db):
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    task = make_task(
        tenant,
        name="minutely-sync",
        schedule={"type": "cron", "expression": "* * * * *", "timezone": "Europe/Paris"},
    )
    TaskDefinition.platform.filter(id=task.id).update(
        created_at=task.created_at.replace(hour=max(0, task.created_at.hour - 1))
    )
    for i in range(8):
        add_execution(task, minutes_ago=40 - 3 * i, status=ExecutionStatus.SUCCESS, lag=0.05 * i)
    first = add_execution(
        task, minutes_ago=10, status=ExecutionStatus.FAILED, error_class="timeout"
    )
    add_execution(
        task,
        minutes_ago=9,
        status=ExecutionStatus.FAILED,
        error_class="http_5xx",
        attempt=2,
        root=first.id,
        dead_lettered=True,
    )
    return tenant, task


def test_dashboard_views_buttons_and_live_updates(page, live_server, history, fast_dashboard):
    """Writes tests/artifacts/dashboard-*.png, one per view."""
    _, task = history
    sign_in(page, live_server)

    # Overview: cards, status table, bar charts drawn as SVG by our own script.
    assert page.locator("#runs-by-status").inner_text().count("Success") == 1
    assert page.locator(".chart svg rect.bar-success").count() > 0
    assert page.locator(".chart svg rect.bar-failed").count() > 0
    screenshot(page, "dashboard-overview")

    # Live: a run that appears in the database shows up without a reload.
    add_execution(task, minutes_ago=0.1, status=ExecutionStatus.RUNNING)
    wait_for_js(
        page, "document.querySelector('#recent').innerText.includes('Running')", timeout=15000
    )
    assert int(page.get_attribute("#live", "data-refreshes")) >= 1

    # Task detail: definition, five next fires, trend chart, failure breakdown, history.
    page.goto(f"{live_server.url}/dashboard/tasks/{task.id}")
    assert page.locator("#next-fires li").count() == 5
    assert "http_5xx" in page.inner_text("#failures")
    assert page.locator(".chart svg circle.dot-lag").count() >= 8
    screenshot(page, "dashboard-task")

    page.click("#btn-pause")
    page.wait_for_selector("#btn-resume")
    assert "paused" in page.inner_text("#task-state")
    assert TaskDefinition.platform.get(id=task.id).paused is True
    page.click("#btn-resume")
    page.wait_for_selector("#btn-pause")
    assert TaskDefinition.platform.get(id=task.id).paused is False
    page.click("#btn-trigger")
    page.wait_for_selector(".messages")
    assert "Triggered minutely-sync" in page.inner_text(".messages")
    assert TaskExecution.platform.filter(task=task, trigger="manual").count() == 1

    # Execution detail: timeline, both attempts of the fire, error, log.
    dead = TaskExecution.platform.get(task=task, dead_lettered=True)
    page.goto(f"{live_server.url}/dashboard/executions/{dead.id}")
    assert page.locator("#attempts tr").count() == 3  # header + two attempts
    assert "Dead-lettered" in page.inner_text("#timeline")
    screenshot(page, "dashboard-execution")

    # Workers: a worker's heartbeat, as its heartbeat thread writes it, shows as a row.
    hostname = f"browser-{uuid.uuid4().hex[:8]}@host"
    worker = Fleet(hostname=hostname, queues=["critical", "normal", "bulk"], concurrency=4)
    registry.run_started(hostname)
    worker.beat()
    try:
        # A tenant member sees their own runs per worker, not the fleet ...
        page.goto(f"{live_server.url}/dashboard/workers")
        page.wait_for_selector("#runs-by-worker")
        assert page.locator("#workers").count() == 0
        # ... which is platform staff's.
        get_user_model().objects.filter(username="acme-admin").update(is_staff=True)
        page.goto(f"{live_server.url}/dashboard/workers")
        row = page.wait_for_selector(f'#workers tr[data-worker="{hostname}"]')
        assert row.query_selector(".w-state").inner_text() == "active"
        assert row.query_selector(".w-active").inner_text() == "1/4"  # one run started
        screenshot(page, "dashboard-workers")
    finally:
        get_redis().srem(redis_key("fleet:workers"), hostname)
        get_redis().delete(redis_key(f"fleet:worker:{hostname}"))
        registry.counters_reset(hostname)

    page.goto(f"{live_server.url}/dashboard/missed?hours=1")
    page.wait_for_selector("#live")
    assert "minutely-sync" in page.inner_text("#live")  # off-minute test rows: all missed
    screenshot(page, "dashboard-missed")

    # Dead-letter queue: retry takes it out and starts a fresh attempt 1.
    page.goto(f"{live_server.url}/dashboard/dlq")
    assert page.locator("#dead-letters button.dlq-retry").count() == 1
    screenshot(page, "dashboard-dlq")
    page.click("#dead-letters button.dlq-retry")
    page.wait_for_selector(".messages")
    assert "empty" in page.inner_text("#dead-letters")
    assert TaskExecution.platform.filter(retry_of_id=dead.id, attempt=1).count() == 1


def test_task_edit_form_refuses_bad_input_then_saves(page, live_server, history):
    """Edit from the task page: a bad cron is shown on its field and changes nothing, a good
    one is saved and the task page lists the new schedule's fires. Writes
    tests/artifacts/dashboard-task-edit*.png."""
    from scheduler_app.models import AuditEntry

    _, task = history
    sign_in(page, live_server, f"/dashboard/tasks/{task.id}")
    page.click("#btn-edit")
    page.wait_for_selector("#task-form")
    assert page.input_value("#id_schedule_expression") == "* * * * *"

    page.fill("#id_schedule_expression", "61 * * * *")
    page.click("#btn-save")
    page.wait_for_selector("#form-errors")
    assert "schedule" not in page.url.split("/")[-1]  # still on the form
    assert page.locator("#field-schedule_expression .field-error").count() == 1
    screenshot(page, "dashboard-task-edit-error")
    assert TaskDefinition.platform.get(id=task.id).schedule_expression == "* * * * *"

    page.fill("#id_schedule_expression", "30 6 * * 1-5")
    page.fill("#id_description", "weekday mornings")
    page.fill("#id_tags", "sync, weekday")
    page.click("#btn-save")
    page.wait_for_selector("#next-fires")
    assert page.url.endswith(f"/dashboard/tasks/{task.id}")
    assert "Saved minutely-sync" in page.inner_text(".messages")
    fires = page.inner_text("#next-fires")
    assert page.locator("#next-fires li").count() == 5 and fires.count("06:30:00 CE") == 5
    screenshot(page, "dashboard-task-edit-saved")
    saved = TaskDefinition.platform.get(id=task.id)
    assert (saved.schedule_expression, saved.tags) == ("30 6 * * 1-5", ["sync", "weekday"])
    assert AuditEntry.platform.filter(action="task.update", object_id=str(task.id)).count() == 1


def test_other_tenants_pages_are_not_found_in_the_browser(page, live_server, history):
    other, _ = tenant_create_with_admin(
        slug="globex", username="globex-admin", password="pw-123456"
    )
    foreign = make_task(other, name="theirs")
    sign_in(page, live_server)
    response = page.goto(f"{live_server.url}/dashboard/tasks/{foreign.id}")
    assert response.status == 404
