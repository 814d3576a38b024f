"""The backfill dialog of the task and DAG pages: a range read in the target's time zone, a
dry run listing the fire times (zone and UTC, the recorded ones marked) that creates nothing,
then the backfill itself through the API's service, audited. Bad input is a 400 naming the
field; a viewer and another tenant get nothing."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from dags.models import Backfill
from dags.services.definitions import dag_create
from scheduler_app.choices import Role
from scheduler_app.models import AuditEntry, TaskExecution, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db

# 02:30 in New York: 07:30 UTC in winter.
DAILY_NY = {"type": "cron", "expression": "30 2 * * *", "timezone": "America/New_York"}


def _range(**overrides):
    return {
        "start": "2026-11-10T00:00",
        "end": "2026-11-13T00:00",
        "max_parallel": "2",
        **overrides,
    }


def test_the_task_page_has_the_backfill_dialog_in_the_tasks_zone(signed_in, tenant):
    task = make_task(tenant, name="nightly", schedule=DAILY_NY)
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert 'id="backfill-dialog"' in page and 'data-open-dialog="backfill-dialog"' in page
    assert "Start (America/New_York)" in page and 'type="datetime-local"' in page
    assert "POST /api/v1/tasks/" not in page
    manual = make_task(tenant, name="by-hand", schedule={"type": "manual"})
    assert (
        'id="backfill-dialog"'
        not in signed_in.get(f"/dashboard/tasks/{manual.id}").content.decode()
    )


def test_a_dry_run_lists_the_fires_in_the_zone_and_utc_and_creates_nothing(signed_in, tenant):
    task = make_task(tenant, name="nightly", schedule=DAILY_NY)
    TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="success",
        scheduled_at=datetime(2026, 11, 11, 7, 30, tzinfo=UTC),
        attempt=1,
        max_attempts=1,
    )
    url = f"/dashboard/tasks/{task.id}/backfill"
    response = signed_in.post(url, {**_range(), "intent": "dry_run"}, HTTP_X_REQUESTED_WITH="fetch")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<html" not in page  # the dialog's answer: the form alone
    assert "Dry run: 3 fire times" in page and "2 at a time" in page
    for day in (10, 11, 12):
        assert f'data-fire="2026-11-{day}T07:30:00+00:00"' in page
        assert f"2026-11-{day} 02:30 EST" in page and f"(2026-11-{day} 07:30 UTC)" in page
    assert page.count('data-outcome="skipped_recorded">skipped (already recorded)<') == 1
    assert 'name="reprocess" value="none" checked' in page
    assert "The range in UTC: 2026-11-10 05:00 to 2026-11-13 05:00." in page
    assert not Backfill.platform.exists() and TaskExecution.platform.count() == 1
    # Without JavaScript: the same answer as a page.
    full = signed_in.post(url, {**_range(), "intent": "dry_run"})
    assert full.status_code == 200 and "<html" in full.content.decode()
    assert "Dry run: 3 fire times" in full.content.decode()


def test_start_creates_the_backfill_as_the_api_does_and_audits_it(signed_in, tenant):
    task = make_task(tenant, name="nightly", schedule=DAILY_NY)
    response = signed_in.post(
        f"/dashboard/tasks/{task.id}/backfill", {**_range(), "intent": "start"}
    )
    assert response.status_code == 302 and response["Location"] == "/dashboard/backfills"
    backfill = Backfill.platform.get()
    assert (backfill.task_id, backfill.total, backfill.max_parallel) == (task.id, 3, 2)
    assert backfill.start_at == datetime(2026, 11, 10, 5, tzinfo=UTC)  # local midnight, EST
    assert TaskExecution.platform.filter(task=task, trigger="backfill").count() == 2
    entry = AuditEntry.platform.get(action="backfill.create")
    assert entry.object_id == str(backfill.id) and entry.detail["after"]["runs"] == 3
    assert entry.detail["via"] == "dashboard" and entry.actor == "user:acme-admin"


@pytest.mark.parametrize(
    ("overrides", "shown"),
    [
        ({"start": "soon"}, "a date and time"),
        ({"end": "2026-11-01T00:00"}, "end must be after start"),
        ({"max_parallel": "0"}, "max_parallel must be between 1 and 100"),
        ({"max_parallel": "many"}, "a whole number from 1 to 100"),
        ({"start": "2026-11-10T03:00", "end": "2026-11-10T04:00"}, "no fire time in this range"),
        ({"reprocess": "sometimes"}, "reprocess must be one of none, failed, all"),
    ],
)
def test_bad_input_is_a_400_next_to_the_field_and_creates_nothing(
    signed_in, tenant, overrides, shown
):
    task = make_task(tenant, name="nightly", schedule=DAILY_NY)
    for intent in ("dry_run", "start"):
        response = signed_in.post(
            f"/dashboard/tasks/{task.id}/backfill", {**_range(**overrides), "intent": intent}
        )
        assert response.status_code == 400
        assert shown in response.content.decode()
    assert not Backfill.platform.exists() and not TaskExecution.platform.exists()


def test_a_dags_backfill_dialog_dry_runs_and_starts(signed_in, tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "hourly-dag",
            "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
            "tasks": [{"id": "one", "handler": {"type": "python", "callable": "echo"}}],
        },
    )
    assert 'id="backfill-dialog"' in signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    body = {"start": "2026-11-01T00:00", "end": "2026-11-01T03:00", "max_parallel": "1"}
    plan = signed_in.post(f"/dashboard/dags/{dag.id}/backfill", {**body, "intent": "dry_run"})
    assert "Dry run: 3 fire times" in plan.content.decode() and not Backfill.platform.exists()
    started = signed_in.post(f"/dashboard/dags/{dag.id}/backfill", {**body, "intent": "start"})
    assert started.status_code == 302 and Backfill.platform.get().dag_id == dag.id


def test_a_viewer_and_another_tenant_cannot_backfill(tenant_and_user, tenant, tenant_factory):
    _tenant, user = tenant_and_user
    mine = make_task(tenant, name="nightly", schedule=DAILY_NY)
    other, _ = tenant_factory("globex")
    theirs = make_task(other, name="their-nightly", schedule=DAILY_NY)
    admin = Client()
    admin.login(username=user.username, password="pw-123456")
    for intent in ("dry_run", "start"):
        answer = admin.post(
            f"/dashboard/tasks/{theirs.id}/backfill", {**_range(), "intent": intent}
        )
        assert answer.status_code == 404
        assert "02:30" not in answer.content.decode()  # not even their fire times
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    viewer = Client()
    viewer.login(username=user.username, password="pw-123456")
    assert "backfill-dialog" not in viewer.get(f"/dashboard/tasks/{mine.id}").content.decode()
    refused = viewer.post(f"/dashboard/tasks/{mine.id}/backfill", {**_range(), "intent": "start"})
    assert refused.status_code == 403
    assert not Backfill.platform.exists() and not TaskExecution.platform.exists()


def _record(task, day: int, status: str) -> TaskExecution:
    return TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status=status,
        scheduled_at=datetime(2026, 11, day, 7, 30, tzinfo=UTC),
        attempt=1,
        max_attempts=1,
    )


def test_the_dialog_offers_the_reprocess_policy_and_the_dry_run_says_each_fires_outcome(
    signed_in, tenant
):
    task = make_task(tenant, name="nightly", schedule=DAILY_NY)
    page = signed_in.get(f"/dashboard/tasks/{task.id}/backfill").content.decode()
    assert "Reprocess: fires that already have a run" in page
    for value in ("none", "failed", "all"):
        assert f'name="reprocess" value="{value}"' in page
    _record(task, 11, "success")
    _record(task, 12, "failed")
    url = f"/dashboard/tasks/{task.id}/backfill"
    body = {**_range(), "reprocess": "failed", "intent": "dry_run"}
    page = signed_in.post(url, body, HTTP_X_REQUESTED_WITH="fetch").content.decode()
    assert 'name="reprocess" value="failed" checked' in page
    assert 'data-outcome="new">new run<' in page
    assert 'data-outcome="skipped_succeeded">skipped (already succeeded)<' in page
    assert 'data-outcome="rerun"><strong>run again (was failed)</strong>' in page
    summary = re.sub(r"<[^>]+>", "", page)
    assert "It would give: 1 new run, 1 run again, 1 skipped (already succeeded)." in summary
    assert not Backfill.platform.exists() and TaskExecution.platform.count() == 2

    started = signed_in.post(url, {**body, "max_parallel": "3", "intent": "start"})
    assert started.status_code == 302
    backfill = Backfill.platform.get()
    assert backfill.reprocess == "failed" and backfill.reprocessed == 1
    again = TaskExecution.platform.get(
        task=task, scheduled_at=datetime(2026, 11, 12, 7, 30, tzinfo=UTC), attempt=2
    )
    assert again.trigger == "backfill"
    entry = AuditEntry.platform.get(action="backfill.create")
    assert entry.detail["after"]["reprocess"] == "failed"
    listed = signed_in.get("/dashboard/backfills").content.decode()
    assert "reprocess failed: 1 run again" in listed and "1 skipped: already recorded" in listed
