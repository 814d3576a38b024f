"""Events: posted by operators, once per Idempotency-Key, matched as a payload subset;
wait_for_event nodes are checked when the DAG is saved."""

from __future__ import annotations

import pytest

from dags.engine.readiness import payload_matches
from dags.models import Dag, Event
from scheduler_app.choices import Role
from scheduler_app.models import TenantMembership

pytestmark = pytest.mark.django_db


def test_payload_matching_is_a_subset():
    payload = {"bucket": "in", "meta": {"size": 3, "kind": "csv"}, "n": 1}
    assert payload_matches({}, payload)
    assert payload_matches({"bucket": "in"}, payload)
    assert payload_matches({"meta": {"kind": "csv"}}, payload)
    assert not payload_matches({"meta": {"kind": "json"}}, payload)
    assert not payload_matches({"bucket": "out"}, payload)
    assert not payload_matches({"missing": None}, payload)
    assert not payload_matches({"n": True}, {"n": 2})


def test_idempotency_key_posts_once(api):
    headers = {"HTTP_IDEMPOTENCY_KEY": "evt-1"}
    first = api.post("/api/v1/events", {"name": "x", "payload": {"a": 1}}, format="json", **headers)
    again = api.post("/api/v1/events", {"name": "x", "payload": {"a": 1}}, format="json", **headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert Event.platform.count() == 1
    assert api.get("/api/v1/events?name=x").json()["count"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [({"name": "bad name!"}, "name"), ({"name": "x", "payload": [1, 2]}, "payload")],
)
def test_bad_events_are_400(api, body, field):
    response = api.post("/api/v1/events", body, format="json")
    assert response.status_code == 400 and response.json()["field"] == field
    assert not Event.platform.exists()


def test_a_viewer_may_not_post_events_and_tenants_do_not_see_each_others(
    api, tenant_and_user, tenant_factory
):
    other, _ = tenant_factory("globex")
    Event.objects.create(tenant=other, name="secret-event", payload={"token": "t0p"})
    assert api.get("/api/v1/events").json()["count"] == 0
    _tenant, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    assert api.post("/api/v1/events", {"name": "x"}, format="json").status_code == 403


@pytest.mark.parametrize(
    ("node", "field"),
    [
        (
            {
                "id": "w",
                "wait_for_event": {"name": "x"},
                "handler": {"type": "python", "callable": "noop"},
            },
            "tasks[0].handler",
        ),
        (
            {"id": "w", "wait_for_event": {"name": "x", "timeout_seconds": 0}},
            "tasks[0].wait_for_event.timeout_seconds",
        ),
        (
            {"id": "w", "wait_for_event": {"name": "x", "match": [1]}},
            "tasks[0].wait_for_event.match",
        ),
        ({"id": "w", "wait_for_event": {"name": ""}}, "tasks[0].wait_for_event.name"),
    ],
)
def test_bad_wait_nodes_are_400_naming_the_field(api, node, field):
    response = api.post("/api/v1/dags", {"dag": "d", "tasks": [node]}, format="json")
    assert response.status_code == 400 and response.json()["field"] == field
    assert not Dag.platform.exists()


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"type": "event"}, "schedule.name"),
        ({"type": "event", "name": "x", "match": [1]}, "schedule.match"),
        ({"type": "event", "name": "x", "expression": "* * * * *"}, "schedule.expression"),
    ],
)
def test_bad_event_schedules_are_400(api, schedule, field):
    response = api.post(
        "/api/v1/tasks",
        {"name": "t", "schedule": schedule, "handler": {"type": "python", "callable": "noop"}},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_an_event_scheduled_task_never_fires_on_time(api):
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "t",
            "schedule": {"type": "event", "name": "x"},
            "handler": {"type": "python", "callable": "noop"},
        },
        format="json",
    ).json()
    assert created["next_fire_at"] is None
    assert created["schedule"] == {"type": "event", "name": "x", "match": {}}
