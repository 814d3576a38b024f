"""What a person sees of a pause on the dashboard: the pause button's note field, and after
pausing "Paused by <who> at <when>: <note>" on the task's and the DAG's page, who paused it
in the task list, the owner, the failure count and the runs left. Another tenant's user
sees none of it and pauses nothing."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from scheduler_app.services.task_definitions import task_pause
from tests.dashboard.conftest import make_dag
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NOTE = 'warehouse migration <until Friday> & "then" resume'


def _pause_form(page: str) -> tuple[str, list[str]]:
    """The pause form's action and the names of its fields, as the browser would post it."""
    form = re.search(r'<form method="post" action="([^"]+)" class="pause-form">(.*?)</form>', page)
    assert form, page
    return form.group(1), re.findall(r'name="([^"]+)"', form.group(2))


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def _record(page: str) -> str:
    found = re.search(r'<p class="pause-record" id="pause-record">(.*?)</p>', page)
    assert found, page
    return _text(found.group(1))


def test_pausing_a_task_with_the_forms_note_shows_who_when_and_the_note(signed_in, tenant_and_user):
    tenant, user = tenant_and_user
    task = make_task(tenant, name="nightly", owner="user:" + user.username)
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    action, fields = _pause_form(page)
    assert "note" in fields and 'id="pause-record"' not in page
    response = signed_in.post(action, {"note": NOTE}, follow=True)
    assert response.status_code == 200
    task.refresh_from_db()
    shown = _record(response.content.decode())
    stamp = task.paused_at.strftime("%Y-%m-%d %H:%M:%S")
    assert shown == f"Paused by {user.username} at {stamp} UTC: {NOTE}"
    # The note is text, never markup.
    assert "<until Friday>" not in response.content.decode()
    assert f"user:{user.username}" in _text(response.content.decode())  # the owner row
    # Resuming clears what the page says.
    signed_in.post(f"/dashboard/tasks/{task.id}/resume")
    assert 'id="pause-record"' not in signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()


def test_the_task_list_says_who_paused_each_paused_task(signed_in, tenant):
    runbook_paused = make_task(tenant, name="flaky")
    task_pause(task=runbook_paused, note="health check failed: 503", paused_by="runbook")
    counted = make_task(tenant, name="limited")
    task_pause(task=counted, note="every run allowed has fired", paused_by="remaining_runs")
    make_task(tenant, name="running-fine")
    page = signed_in.get("/dashboard/tasks").content.decode()
    rows = {
        name: row
        for row in re.findall(r"<tr data-task-id=.*?</tr>", page)
        for name in re.findall(r">([\w-]+)</a></td>", row)[:1]
    }
    assert "by the runbook" in _text(rows["flaky"])
    assert 'title="Paused by the runbook at ' in rows["flaky"]
    assert "health check failed: 503" in rows["flaky"]
    assert "by policy.remaining_runs" in _text(rows["limited"])
    assert "paused-by" not in rows["running-fine"]


def test_the_task_page_shows_the_failure_count_and_the_runs_left(signed_in, tenant):
    task = make_task(
        tenant, name="counted", policy={"remaining_runs": 3, "pause_after_failures": 5}
    )
    page = _text(signed_in.get(f"/dashboard/tasks/{task.id}").content.decode())
    assert "3 more scheduled runs, then the schedule pauses itself" in page
    # The next fire times stop where the schedule will pause itself.
    html = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert html.split('id="next-fires"')[1].split("</ol>")[0].count("<li>") == 3
    assert "failures in a row" not in page  # none yet
    TaskDefinition.platform.filter(id=task.id).update(consecutive_failures=2)
    page = _text(signed_in.get(f"/dashboard/tasks/{task.id}").content.decode())
    assert "failures in a row2 (the runbook acts at 5)" in page


def test_pausing_a_dag_with_the_forms_note_shows_the_record(signed_in, tenant_and_user):
    tenant, user = tenant_and_user
    dag = make_dag(tenant)
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    action, fields = _pause_form(page)
    assert "note" in fields
    response = signed_in.post(action, {"note": "upstream is down"}, follow=True)
    dag.refresh_from_db()
    stamp = dag.paused_at.strftime("%Y-%m-%d %H:%M:%S")
    shown = _record(response.content.decode())
    assert shown == f"Paused by {user.username} at {stamp} UTC: upstream is down"
    listed = signed_in.get("/dashboard/dags").content.decode()
    assert f'title="Paused by {user.username} at {stamp} UTC: upstream is down"' in listed


def test_another_tenants_user_neither_sees_nor_pauses_with_a_note(tenant, tenant_factory):
    task = make_task(tenant, name="ours")
    task_pause(task=task, note="secret maintenance window", paused_by="user:acme-admin")
    dag = make_dag(tenant)
    _, intruder = tenant_factory("globex")
    attacker = Client()
    assert attacker.login(username=intruder.username, password="pw-123456")
    assert attacker.get(f"/dashboard/tasks/{task.id}").status_code == 404
    assert "secret maintenance window" not in attacker.get("/dashboard/tasks").content.decode()
    assert attacker.post(f"/dashboard/dags/{dag.id}/pause", {"note": "x"}).status_code == 404
    dag.refresh_from_db()
    assert not dag.paused and dag.pause_note == ""
    assert Dag.platform.filter(paused=True).count() == 0
