"""The dashboard in a real browser: every view renders (screenshots in tests/artifacts/),
charts are drawn, the pause/resume/trigger and dead-letter buttons work, pages update live."""

from __future__ import annotations

import pytest

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.browser.conftest import screenshot
from tests.dashboard.conftest import add_execution
from tests.factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fast_dashboard(settings):
    settings.MONITORING = {
        **settings.MONITORING,
        "DASHBOARD_POLL_SECONDS": 0.5,
        "INSPECT_TIMEOUT_SECONDS": 0.2,
    }


@pytest.fixture
def history(transactional_db):
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    task = make_task(
        tenant,
        name="minutely-sync",
        schedule={"type": "cron", "expression": "* * * * *", "timezone": "Europe/Paris"},
    )
    TaskDefinition.objects.filter(id=task.id).update(
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


def sign_in(page, live_server, path="/dashboard/"):
    page.goto(f"{live_server.url}{path}")
    page.fill("input[name=username]", "acme-admin")
    page.fill("input[name=password]", "pw-123456")
    page.click("button[type=submit]")
    page.wait_for_selector("#live")


def test_dashboard_views_buttons_and_live_updates(page, live_server, history, fast_dashboard):
    """Writes tests/artifacts/dashboard-*.png, one per view."""
    _, task = history
    sign_in(page, live_server)

    # Overview: cards, status table, bar charts drawn as SVG by our own script.
    assert page.locator("#runs-by-status").inner_text().count("success") == 1
    assert page.locator(".chart svg rect.bar-success").count() > 0
    assert page.locator(".chart svg rect.bar-failed").count() > 0
    screenshot(page, "dashboard-overview")

    # Live: a run that appears in the database shows up without a reload.
    add_execution(task, minutes_ago=0.1, status=ExecutionStatus.RUNNING)
    page.wait_for_function(
        "document.querySelector('#recent').innerText.includes('running')", timeout=15000
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
    assert TaskDefinition.objects.get(id=task.id).paused is True
    page.click("#btn-resume")
    page.wait_for_selector("#btn-pause")
    assert TaskDefinition.objects.get(id=task.id).paused is False
    page.click("#btn-trigger")
    page.wait_for_selector(".messages")
    assert "Triggered minutely-sync" in page.inner_text(".messages")
    assert TaskExecution.objects.filter(task=task, trigger="manual").count() == 1

    # Execution detail: timeline, both attempts of the fire, error, log.
    dead = TaskExecution.objects.get(task=task, dead_lettered=True)
    page.goto(f"{live_server.url}/dashboard/executions/{dead.id}")
    assert page.locator("#attempts tr").count() == 3  # header + two attempts
    assert "dead-lettered" in page.inner_text("#timeline")
    screenshot(page, "dashboard-execution")

    page.goto(f"{live_server.url}/dashboard/workers")
    page.wait_for_selector("#workers")
    screenshot(page, "dashboard-workers")

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
    assert TaskExecution.objects.filter(retry_of_id=dead.id, attempt=1).count() == 1


def test_other_tenants_pages_are_not_found_in_the_browser(page, live_server, history):
    other, _ = tenant_create_with_admin(
        slug="globex", username="globex-admin", password="pw-123456"
    )
    foreign = make_task(other, name="theirs")
    sign_in(page, live_server)
    response = page.goto(f"{live_server.url}/dashboard/tasks/{foreign.id}")
    assert response.status == 404
