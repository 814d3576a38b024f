"""`schedule.exclude` through the API: saved, read back, shown in the preview's timeline,
refused with a 400 naming the rule's field (saving nothing), and walled off by tenant."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from rest_framework.test import APIClient

from dags.models import Dag
from scheduler_app.models import TaskDefinition

pytestmark = pytest.mark.django_db

HANDLER = {"type": "python", "callable": "noop"}
WEEKDAYS_BAVARIA = {
    "type": "cron",
    "expression": "0 9 * * *",
    "timezone": "Europe/Berlin",
    "exclude": [
        {"calendar": "holidays:de-by", "reason": "office closed"},
        {"cron": "* * * * 6,0"},
        {"from": "2026-12-24", "to": "2027-01-01", "reason": "year-end freeze"},
    ],
}


def _task(name="calendar", schedule=WEEKDAYS_BAVARIA) -> dict:
    return {"name": name, "schedule": schedule, "handler": HANDLER}


def _client_of(user) -> APIClient:
    client = APIClient()
    token = client.post(
        "/api/v1/auth/token", {"username": user.username, "password": "pw-123456"}, format="json"
    ).json()["access"]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_a_task_keeps_its_exclusions_in_canonical_form(api):
    created = api.post("/api/v1/tasks", _task(), format="json")
    assert created.status_code == 201, created.content
    exclude = created.json()["schedule"]["exclude"]
    assert exclude == [
        {"calendar": "holidays:DE-BY", "reason": "office closed"},
        {"cron": "* * * * 6,0"},
        {"from": "2026-12-24", "to": "2027-01-01", "reason": "year-end freeze"},
    ]
    task_id = created.json()["id"]
    assert api.get(f"/api/v1/tasks/{task_id}").json()["schedule"]["exclude"] == exclude
    # The next fire is the next one not excluded (computed at save: no weekend, no holiday).
    task = TaskDefinition.platform.get(id=task_id)
    local = task.next_fire_at.astimezone(ZoneInfo("Europe/Berlin"))
    assert local.weekday() < 5
    # A schedule sent without `exclude` drops them.
    plain = {"type": "cron", "expression": "0 9 * * *", "timezone": "Europe/Berlin"}
    patched = api.patch(f"/api/v1/tasks/{task_id}", {"schedule": plain}, format="json")
    assert patched.status_code == 200, patched.content
    assert "exclude" not in patched.json()["schedule"]
    assert TaskDefinition.platform.get(id=task_id).schedule_exclude == []


def test_the_preview_timeline_shows_skipped_fires_and_why(api):
    task_id = api.post("/api/v1/tasks", _task(), format="json").json()["id"]
    body = api.get(f"/api/v1/tasks/{task_id}/schedule-preview?count=10").json()
    timeline = body["timeline"]
    fired = [entry for entry in timeline if not entry["skipped"]]
    assert [entry["utc"] for entry in fired] == [fire["utc"] for fire in body["fire_times"]]
    assert len(fired) == 10
    for entry in timeline:
        day = datetime.fromisoformat(entry["local"])
        if day.weekday() >= 5:
            assert entry["skipped"] and entry["reason"] == "excluded by cron * * * * 6,0"
        elif not entry["skipped"]:
            assert entry["reason"] == ""
    assert any(entry["skipped"] for entry in timeline)


@pytest.mark.parametrize(
    ("exclude", "field"),
    [
        ([{"calendar": "holidays:XX"}], "schedule.exclude[0].calendar"),
        ([{"calendar": "holidays:DE-ZZ"}], "schedule.exclude[0].calendar"),
        ([{"date": "2026-13-01"}], "schedule.exclude[0].date"),
        (
            [{"date": "2026-12-25"}, {"from": "2026-12-31", "to": "2026-12-24"}],
            "schedule.exclude[1].to",
        ),
        ([{"cron": "not a cron"}], "schedule.exclude[0].cron"),
        ([{"date": "2026-12-25", "when": "always"}], "schedule.exclude[0].when"),
        ("2026-12-25", "schedule.exclude"),
        ([{"cron": "* * * * *", "reason": "never"}], "schedule.exclude"),  # skips every fire
        ([{"from": "2000-01-01", "to": "9999-12-31"}], "schedule.exclude"),
    ],
)
def test_bad_exclusions_are_a_400_naming_the_field_and_change_nothing(api, exclude, field):
    schedule = {"type": "cron", "expression": "0 9 * * *", "exclude": exclude}
    response = api.post("/api/v1/tasks", _task(schedule=schedule), format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert not TaskDefinition.platform.exists()
    # On an update too: the task keeps its schedule.
    task_id = api.post("/api/v1/tasks", _task(), format="json").json()["id"]
    before = TaskDefinition.platform.get(id=task_id)
    response = api.patch(f"/api/v1/tasks/{task_id}", {"schedule": schedule}, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    after = TaskDefinition.platform.get(id=task_id)
    assert after.schedule_exclude == before.schedule_exclude
    assert after.next_fire_at == before.next_fire_at


def test_another_tenant_sees_neither_the_exclusions_nor_the_preview(api, tenant_factory):
    task_id = api.post("/api/v1/tasks", _task(), format="json").json()["id"]
    _, stranger = tenant_factory("rival")
    attacker = _client_of(stranger)
    assert attacker.get(f"/api/v1/tasks/{task_id}").status_code == 404
    assert attacker.get(f"/api/v1/tasks/{task_id}/schedule-preview").status_code == 404
    hijack = {"schedule": {"type": "cron", "expression": "* * * * *", "exclude": []}}
    assert attacker.patch(f"/api/v1/tasks/{task_id}", hijack, format="json").status_code == 404
    assert attacker.get("/api/v1/tasks").json()["count"] == 0
    assert TaskDefinition.platform.get(id=task_id).schedule_exclude[0]["calendar"] == (
        "holidays:DE-BY"
    )


def test_a_dag_keeps_its_exclusions_and_its_next_fire_skips_them(api):
    schedule = {
        "type": "cron",
        "expression": "0 9 * * *",
        "timezone": "UTC",
        "exclude": [{"cron": "* * * * 6,0", "reason": "no weekends"}],
    }
    dag = {"dag": "weekdays", "schedule": schedule, "tasks": [{"id": "a", "handler": HANDLER}]}
    created = api.post("/api/v1/dags", dag, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["schedule"]["exclude"] == [
        {"cron": "* * * * 6,0", "reason": "no weekends"}
    ]
    stored = Dag.platform.get(id=created.json()["id"])
    assert stored.next_fire_at.astimezone(UTC).weekday() < 5
    bad = {**dag, "schedule": {**schedule, "exclude": [{"calendar": "holidays:Atlantis"}]}}
    response = api.put(f"/api/v1/dags/{stored.id}", bad, format="json")
    assert response.status_code == 400, response.content
    assert "schedule.exclude[0].calendar" in response.json()["errors"]
    assert Dag.platform.get(id=stored.id).version == stored.version


def test_a_one_shot_on_an_excluded_day_is_refused(api):
    schedule = {
        "type": "once",
        "run_at": "2099-12-25T09:00:00",
        "timezone": "America/New_York",
        "exclude": [{"calendar": "holidays:US"}],
    }
    response = api.post("/api/v1/tasks", _task(schedule=schedule), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"]["schedule.exclude"] == [
        "the exclusions skip every fire of the schedule"
    ]
    assert not TaskDefinition.platform.exists()
