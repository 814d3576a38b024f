"""Sleep and sensor nodes are checked when their DAG is saved: a 400 naming the field, and
nothing saved."""

from __future__ import annotations

import pytest

from dags.models import Dag
from scheduler_app.models import Tenant

pytestmark = pytest.mark.django_db

HTTP = {"kind": "http", "url": "https://status.example.com/ready"}
BAD_PATH = {"path": "$[", "equals": 1}
NOOP = {"type": "python", "callable": "noop"}


@pytest.mark.parametrize(
    ("node", "field"),
    [
        # A sensor interval under 1 s.
        ({"id": "s", "type": "sensor", "sensor": HTTP, "interval": "500ms"}, "tasks[0].interval"),
        ({"id": "s", "type": "sensor", "sensor": HTTP, "interval": 0}, "tasks[0].interval"),
        # An unknown sensor kind; missing bucket, url, query.
        ({"id": "s", "type": "sensor", "sensor": {"kind": "ftp"}}, "tasks[0].sensor.kind"),
        (
            {"id": "s", "type": "sensor", "sensor": {"kind": "s3", "key": "a.csv"}},
            "tasks[0].sensor.bucket",
        ),
        ({"id": "s", "type": "sensor", "sensor": {"kind": "http"}}, "tasks[0].sensor.url"),
        (
            {"id": "s", "type": "sensor", "sensor": {"kind": "sql", "dsn": "{{secret:db}}"}},
            "tasks[0].sensor.query",
        ),
        # Credentials are secret references, never written into the definition.
        (
            {
                "id": "s",
                "type": "sensor",
                "sensor": {"kind": "sql", "dsn": "postgresql://u:pw@db/x", "query": "select 1"},
            },
            "tasks[0].sensor.dsn",
        ),
        (
            {"id": "s", "type": "sensor", "sensor": HTTP, "on_timeout": "maybe"},
            "tasks[0].on_timeout",
        ),
        (
            {"id": "s", "type": "sensor", "sensor": HTTP, "timeout": "1s", "interval": "5s"},
            "tasks[0].timeout",
        ),
        (
            {"id": "s", "type": "sensor", "sensor": {**HTTP, "jsonpath": BAD_PATH}},
            "tasks[0].sensor.jsonpath.path",
        ),
        # A literal private address is refused when saved (names are checked at each poke).
        (
            {"id": "s", "type": "sensor", "sensor": {"kind": "http", "url": "http://10.0.0.5/"}},
            "tasks[0].sensor.url",
        ),
        (
            {
                "id": "s",
                "type": "sensor",
                "sensor": {
                    "kind": "s3",
                    "bucket": "b",
                    "key": "k",
                    "endpoint_url": "http://169.254.169.254",
                },
            },
            "tasks[0].sensor.endpoint_url",
        ),
        # Sleeps.
        ({"id": "z", "type": "sleep"}, "tasks[0].duration"),
        ({"id": "z", "type": "sleep", "duration": "soon"}, "tasks[0].duration"),
        ({"id": "z", "type": "sleep", "until": "2026-13-01T00:00:00Z"}, "tasks[0].until"),
        ({"id": "z", "type": "sleep", "until": "2027-01-01T00:00:00"}, "tasks[0].until"),
        ({"id": "z", "type": "sleep", "until": "{{ scheduled_at }}"}, "tasks[0].until"),
        ({"id": "z", "type": "sleep", "duration": "1h", "interval": "1s"}, "tasks[0].interval"),
        (
            {"id": "z", "type": "sleep", "duration": "1h", "handler": NOOP},
            "tasks[0].handler",
        ),
        ({"id": "z", "type": "nap"}, "tasks[0].type"),
        # A task node with a sensor's keys forgot its type.
        ({"id": "t", "handler": "noop", "interval": "5s"}, "tasks[0].interval"),
    ],
)
def test_bad_sleep_and_sensor_nodes_are_400_naming_the_field(api, node, field):
    response = api.post("/api/v1/dags", {"dag": "d", "tasks": [node]}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Dag.platform.exists()


def test_a_sleep_longer_than_the_retention_window_is_400(api, tenant):
    Tenant.objects.filter(id=tenant.id).update(retention_days=7)
    body = {"dag": "d", "tasks": [{"id": "z", "type": "sleep", "duration": "8d"}]}
    response = api.post("/api/v1/dags", body, format="json")
    assert response.status_code == 400 and response.json()["field"] == "tasks[0].duration"
    assert "retention window (7 days)" in response.json()["message"]
    sensor = {"id": "s", "type": "sensor", "sensor": HTTP, "timeout": "30d"}
    response = api.post("/api/v1/dags", {"dag": "d", "tasks": [sensor]}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "tasks[0].timeout"
    assert not Dag.platform.exists()
    body["tasks"][0]["duration"] = "7d"
    assert api.post("/api/v1/dags", body, format="json").status_code == 201


def test_good_sleep_and_sensor_nodes_are_saved_normalized(api):
    body = {
        "dag": "d",
        "parameters": {"release_at": "2027-01-01T00:00:00Z"},
        "tasks": [
            {"id": "nap", "type": "sleep", "duration": "2h"},
            {"id": "gate", "type": "sleep", "until": "{{ parameters.release_at }}"},
            {
                "id": "ready",
                "type": "sensor",
                "depends_on": ["nap", "gate"],
                "sensor": {**HTTP, "jsonpath": {"path": "$.state", "equals": "ready"}},
                "interval": "30s",
                "timeout": "6h",
                "on_timeout": "skip",
            },
        ],
    }
    response = api.post("/api/v1/dags", body, format="json")
    assert response.status_code == 201, response.content
    nodes = {node["id"]: node for node in Dag.platform.get().versions.get().spec["tasks"]}
    assert nodes["nap"]["duration"] == 7200.0
    assert nodes["gate"]["until"] == "{{ parameters.release_at }}"
    ready = nodes["ready"]
    assert (ready["interval"], ready["max_interval"], ready["timeout"]) == (30.0, 600.0, 21600.0)
    assert ready["on_timeout"] == "skip" and ready["sensor"]["expected_status"] == [200]
    # What is stored saves again as it is (the dashboard's editor and the API hand it back).
    stored = Dag.platform.get().versions.get().spec
    again = api.put(f"/api/v1/dags/{Dag.platform.get().id}", stored, format="json")
    assert again.status_code == 200, again.content
    assert Dag.platform.get().versions.order_by("-number").first().spec["tasks"] == stored["tasks"]
