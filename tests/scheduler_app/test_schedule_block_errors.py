"""Two mistakes in one schedule block are two errors in one answer (they were reported one
per submit): the services' check, the API's 400 body (tasks and DAGs) field by field."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler_app.errors import ValidationErrors, ValidationFailed
from scheduler_app.models import TaskDefinition
from scheduler_app.services.task_spec import schedule_block_errors, task_spec_to_fields

HANDLER = {"type": "shell", "command": ["echo", "hi"]}
ZONE = "unknown timezone 'Mars/Olympus'; use an IANA name such as 'Europe/Berlin'"

TWO_OR_MORE = [
    pytest.param(
        {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Olympus"},
        {"schedule.expression", "schedule.timezone"},
        id="cron-and-zone",
    ),
    pytest.param(
        {"type": "interval", "expression": "0s", "timezone": "Mars/Olympus"},
        {"schedule.expression", "schedule.timezone"},
        id="interval-and-zone",
    ),
    pytest.param(
        {
            "type": "once",
            "run_at": "not a date",
            "scheduled_at": "2030-01-01T00:00:00Z",
            "timezone": "Mars/Olympus",
        },
        {"schedule.run_at", "schedule.scheduled_at", "schedule.timezone"},
        id="once-three",
    ),
    pytest.param(
        {"type": "event", "name": "bad name!", "match": "not an object", "expression": "x"},
        {"schedule.name", "schedule.match", "schedule.expression"},
        id="event-three",
    ),
]


@pytest.mark.parametrize(("schedule", "fields"), TWO_OR_MORE)
def test_the_service_refuses_every_mistake_of_the_block_at_once(schedule, fields):
    with pytest.raises(ValidationErrors) as refused:
        task_spec_to_fields({"schedule": schedule}, anchor=timezone.now(), partial=True)
    assert {error.field for error in refused.value.errors} == fields
    # Callers that know only ValidationFailed still read the first refusal.
    assert isinstance(refused.value, ValidationFailed)
    assert refused.value.field == refused.value.errors[0].field


def test_an_unknown_zone_does_not_hide_a_bad_expression():
    errors = schedule_block_errors(
        {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Olympus"},
        anchor=timezone.now(),
    )
    assert [(e.field, e.message) for e in errors] == [
        ("schedule.timezone", ZONE),
        ("schedule.expression", "minute field value 61 out of range 0-59"),
    ]


def test_one_mistake_is_still_a_plain_validation_error_and_a_good_block_none():
    with pytest.raises(ValidationFailed) as refused:
        task_spec_to_fields(
            {"schedule": {"type": "cron", "expression": "61 * * * *"}},
            anchor=timezone.now(),
            partial=True,
        )
    assert type(refused.value) is ValidationFailed
    good = {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"}
    assert schedule_block_errors(good, anchor=timezone.now()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(("schedule", "fields"), TWO_OR_MORE)
def test_the_api_400_names_every_field_of_the_block(api, schedule, fields):
    response = api.post(
        "/api/v1/tasks", {"name": "t", "schedule": schedule, "handler": HANDLER}, format="json"
    )
    assert response.status_code == 400, response.content
    body = response.json()
    assert fields <= set(body["errors"]), body
    assert body["field"] in fields and body["message"]
    assert not TaskDefinition.platform.exists()


@pytest.mark.django_db
def test_a_wrong_type_does_not_hide_a_wrong_zone_nor_another_fields_mistake(api):
    response = api.post(
        "/api/v1/tasks",
        {"schedule": {"type": "weekly", "timezone": "Mars/Olympus"}, "handler": HANDLER},
        format="json",
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["schedule.type"] == ['"weekly" is not a valid choice.']
    assert errors["schedule.timezone"] == [ZONE]
    assert errors["name"] == ["This field is required."]


@pytest.mark.django_db
def test_put_and_patch_report_the_whole_block_too(api, tenant):
    from tests.factories import make_task

    task = make_task(tenant, name="nightly", schedule={"type": "cron", "expression": "0 2 * * *"})
    bad = {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Olympus"}
    patch = api.patch(f"/api/v1/tasks/{task.id}", {"schedule": bad}, format="json")
    put = api.put(
        f"/api/v1/tasks/{task.id}",
        {"name": "nightly", "schedule": bad, "handler": HANDLER},
        format="json",
    )
    for response in (patch, put):
        assert response.status_code == 400
        assert set(response.json()["errors"]) == {"schedule.expression", "schedule.timezone"}
    task.refresh_from_db()
    assert (task.schedule_expression, task.timezone) == ("0 2 * * *", "UTC")


@pytest.mark.django_db
def test_a_dags_schedule_block_reports_every_mistake(api):
    response = api.post(
        "/api/v1/dags",
        {
            "dag": "two-mistakes",
            "schedule": {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Olympus"},
            "tasks": [{"id": "a", "handler": {"type": "shell", "command": ["true"]}}],
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert {"schedule.expression", "schedule.timezone"} <= set(response.json()["errors"])
