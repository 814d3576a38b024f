"""Pausing with a note in a real browser: the task page's note field, typed into and sent
with the Pause button, comes back as "Paused by <who> at <when>: <note>" on the page, the
task list says who paused it, and Resume clears it. The DAG page does the same."""

from __future__ import annotations

import pytest

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.browser.conftest import screenshot, sign_in
from tests.dashboard.conftest import make_dag
from tests.factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("chromium")]


@pytest.fixture
def nightly(transactional_db):
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    task = make_task(
        tenant,
        name="nightly-export",
        schedule={"type": "cron", "expression": "0 2 * * *"},
        owner="user:acme-admin",
    )
    return tenant, task


def test_a_note_typed_into_the_pause_form_is_what_the_page_shows(page, live_server, nightly):
    tenant, task = nightly
    sign_in(page, live_server, path=f"/dashboard/tasks/{task.id}")
    assert page.locator("#pause-record").count() == 0
    page.fill("#pause-note-input", "warehouse migration until Friday")
    page.click("#btn-pause")
    page.wait_for_selector("#pause-record")
    task.refresh_from_db()
    stamp = task.paused_at.strftime("%Y-%m-%d %H:%M:%S")
    assert page.locator("#pause-record").inner_text() == (
        f"Paused by acme-admin at {stamp} UTC: warehouse migration until Friday"
    )
    assert page.locator("#owner").inner_text() == "user:acme-admin"
    screenshot(page, "dashboard-task-paused-with-note")

    page.goto(f"{live_server.url}/dashboard/tasks")
    row = page.locator(f"tr[data-task-id='{task.id}']")
    assert "by acme-admin" in row.inner_text()
    assert row.locator(".s-paused").get_attribute("title") == (
        f"Paused by acme-admin at {stamp} UTC: warehouse migration until Friday"
    )

    page.goto(f"{live_server.url}/dashboard/tasks/{task.id}")
    page.click("#btn-resume")
    page.wait_for_selector("#btn-pause")
    assert page.locator("#pause-record").count() == 0
    assert TaskDefinition.platform.get(id=task.id).pause_note == ""

    dag = make_dag(tenant)
    page.goto(f"{live_server.url}/dashboard/dags/{dag.id}")
    page.fill("#pause-note-input", "upstream is down")
    page.click("#btn-dag-pause")
    page.wait_for_selector("#pause-record")
    assert page.locator("#pause-record").inner_text().endswith("UTC: upstream is down")
    assert Dag.platform.get(id=dag.id).paused_by == "user:acme-admin"
