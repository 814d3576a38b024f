"""Backfill requests: bad input is a 400 naming the field and creates nothing."""

from __future__ import annotations

import pytest

from dags.models import Backfill
from tests.factories import make_task

pytestmark = pytest.mark.django_db

HOURLY = {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}
NEW = {"outcome": "new", "was": None}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "end"),
        ({"start": "2026-11-01T00:00:00", "end": "2026-11-02T00:00:00Z"}, "start"),
        ({"start": "yesterday", "end": "2026-11-02T00:00:00Z"}, "start"),
        (
            {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z", "max_parallel": 0},
            "max_parallel",
        ),
        ({"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),  # > 10,000
        ({"start": "2026-11-01T00:10:00Z", "end": "2026-11-01T00:20:00Z"}, "start"),  # none
    ],
)
def test_bad_backfill_requests_are_400_naming_the_field(api, tenant, body, field):
    task = make_task(tenant, schedule=HOURLY)
    response = api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Backfill.platform.exists()


def test_a_manual_task_has_nothing_to_backfill(api, tenant):
    task = make_task(tenant, schedule={"type": "manual"})
    response = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 400 and response.json()["field"] == "schedule"


def test_another_tenants_task_and_backfill_are_not_found(api, tenant, tenant_factory):
    other, _ = tenant_factory("globex")
    task = make_task(other, schedule=HOURLY)
    body = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z"}
    assert api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json").status_code == 404
    from datetime import UTC, datetime

    from dags.services.backfills import backfill_create

    theirs = backfill_create(
        tenant=other,
        task=task,
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=datetime(2026, 11, 1, 3, tzinfo=UTC),
        max_parallel=1,
    )
    assert api.get(f"/api/v1/backfills/{theirs.id}").status_code == 404
    assert api.post(f"/api/v1/backfills/{theirs.id}/cancel").status_code == 404
    assert api.get("/api/v1/backfills").json()["count"] == 0
    theirs.refresh_from_db()
    assert theirs.status == "running"


def test_the_leaders_round_releases_the_next_runs_as_room_frees(tenant):
    from datetime import UTC, datetime

    from dags.services.backfills import backfill_create, backfills_advance
    from scheduler_app.models import TaskExecution

    task = make_task(tenant, schedule=HOURLY)
    backfill = backfill_create(
        tenant=tenant,
        task=task,
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=datetime(2026, 11, 1, 5, tzinfo=UTC),
        max_parallel=2,
    )
    assert backfills_advance() == 0  # no room: two are waiting
    first = TaskExecution.platform.filter(task=task).order_by("scheduled_at").first()
    TaskExecution.platform.filter(id=first.id).update(status="success")
    assert backfills_advance() == 1
    TaskExecution.platform.filter(task=task).update(status="success")
    assert backfills_advance() == 2
    TaskExecution.platform.filter(task=task).update(status="success")
    assert backfills_advance() == 0
    backfill.refresh_from_db()
    assert backfill.status == "completed" and backfill.released == 5
    assert sorted(e.scheduled_at.hour for e in TaskExecution.platform.filter(task=task)) == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_a_dry_run_lists_the_fires_marks_the_recorded_ones_and_creates_nothing(api, tenant):
    from datetime import UTC, datetime

    from scheduler_app.models import TaskExecution

    task = make_task(tenant, schedule=HOURLY)
    recorded = TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="success",
        scheduled_at=datetime(2026, 11, 1, 1, tzinfo=UTC),
        attempt=1,
        max_attempts=1,
    )
    body = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z", "dry_run": True}
    response = api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json")
    assert response.status_code == 200, response.content
    plan = response.json()
    assert plan["dry_run"] is True and plan["total"] == 3
    assert plan["fires"] == [
        {"scheduled_at": "2026-11-01T00:00:00Z", "already_recorded": False, **NEW},
        {
            "scheduled_at": "2026-11-01T01:00:00Z",
            "already_recorded": True,
            "outcome": "skipped_recorded",
            "was": "success",
        },
        {"scheduled_at": "2026-11-01T02:00:00Z", "already_recorded": False, **NEW},
    ]
    assert not Backfill.platform.exists()
    assert list(TaskExecution.platform.values_list("id", flat=True)) == [recorded.id]
    refused = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {**body, "end": "2026-10-01T00:00:00Z"},
        format="json",
    )
    assert refused.status_code == 400 and refused.json()["field"] == "end"


@pytest.mark.parametrize("bad", ["sometimes", "", 1, None, ["failed"]])
def test_an_unknown_reprocess_policy_is_a_400_naming_reprocess(api, tenant, bad):
    task = make_task(tenant, schedule=HOURLY)
    body = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z", "reprocess": bad}
    for dry_run in (True, False):
        response = api.post(
            f"/api/v1/tasks/{task.id}/backfill", {**body, "dry_run": dry_run}, format="json"
        )
        assert response.status_code == 400, response.content
        assert response.json()["field"] == "reprocess"
    assert not Backfill.platform.exists()


def test_the_api_runs_failed_fires_again_and_its_dry_run_says_so(api, tenant):
    from datetime import UTC, datetime

    from scheduler_app.models import TaskExecution

    task = make_task(tenant, schedule=HOURLY)
    for hour, status in ((1, "success"), (2, "failed")):
        TaskExecution.objects.create(
            tenant=tenant,
            task=task,
            status=status,
            scheduled_at=datetime(2026, 11, 1, hour, tzinfo=UTC),
            attempt=1,
            max_attempts=1,
        )
    body = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z", "reprocess": "failed"}
    url = f"/api/v1/tasks/{task.id}/backfill"
    plan = api.post(url, {**body, "dry_run": True}, format="json").json()
    assert plan["reprocess"] == "failed"
    assert [(f["outcome"], f["was"]) for f in plan["fires"]] == [
        ("new", None),
        ("skipped_succeeded", "success"),
        ("rerun", "failed"),
    ]
    assert plan["counts"]["new"] == 1 and plan["counts"]["rerun"] == 1
    assert TaskExecution.platform.filter(task=task).count() == 2
    created = api.post(url, {**body, "max_parallel": 3}, format="json")
    assert created.status_code == 201, created.content
    answer = created.json()
    assert answer["reprocess"] == "failed" and answer["reprocessed"] == 1
    assert answer["already_recorded"] == 1
    again = TaskExecution.platform.get(
        task=task, scheduled_at=datetime(2026, 11, 1, 2, tzinfo=UTC), attempt=2
    )
    assert again.trigger == "backfill"
