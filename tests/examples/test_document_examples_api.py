"""Both JSON examples of the design document, posted verbatim: 201, and they read back with
what they said. The shapes they use are first-class spellings (cpu cores, memory
quantities, the timeout inside resource_requirements, string handlers in DAG nodes)."""

from __future__ import annotations

import json

import pytest

from scheduler_app.models import TaskDefinition
from tests.examples.document import create_document_channels, dag_definition, task_request

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def document_channels(api):
    create_document_channels(api)


def test_the_example_needs_its_receivers_configured(api, settings):
    # The targets name a Slack connection and a PagerDuty service: without them, a 400
    # naming the target, and nothing saved.
    api.delete(f"/api/v1/channels/{_channel_id(api, 'critical')}")
    response = api.post("/api/v1/tasks", task_request(), format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "notifications.on_dlq[0]"
    assert "pagerduty://critical" in response.json()["message"]
    assert not TaskDefinition.platform.exists()


def _channel_id(api, name: str) -> str:
    channels = api.get("/api/v1/channels").json()["results"]
    return next(channel["id"] for channel in channels if channel["name"] == name)


def test_the_create_task_request_is_created_and_reads_back_as_written(api, settings):
    settings.WORKER = {**settings.WORKER, "CONTAINER_RUNTIME": None}  # a fresh install
    response = api.post("/api/v1/tasks", task_request(), format="json")
    assert response.status_code == 201, response.content
    body = api.get(f"/api/v1/tasks/{response.json()['id']}").json()
    written = task_request()
    assert body["handler"]["resource_requirements"] == {
        "cpu": "2.0",
        "memory": "4Gi",
        "timeout_seconds": 3600,
    }
    assert body["handler"]["image"] == written["handler"]["image"]
    assert body["handler"]["command"] == written["handler"]["command"]
    assert body["handler"]["environment"] == written["handler"]["environment"]
    assert body["timeout_seconds"] == 3600
    assert body["notifications"] == written["notifications"]
    assert body["tags"] == ["etl", "sales", "daily"]
    assert body["retry_policy"] == written["retry_policy"]
    assert body["schedule"] == written["schedule"]
    assert TaskDefinition.platform.get(id=body["id"]).timeout_seconds == 3600


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"cpu": "lots"}, "handler.resource_requirements.cpu"),
        ({"cpu": 0}, "handler.resource_requirements.cpu"),
        ({"memory": "4Gb"}, "handler.resource_requirements.memory"),
        ({"memory": "4Gi", "memory_bytes": 10}, "handler.resource_requirements.memory"),
        ({"timeout_seconds": 0}, "handler.resource_requirements.timeout_seconds"),
        ({"timeout_seconds": 10**7}, "handler.resource_requirements.timeout_seconds"),
        ({"gpu": 1}, "handler.resource_requirements.gpu"),
    ],
)
def test_bad_resource_spellings_are_refused_naming_the_field(api, resources, field):
    request = task_request()
    request["handler"]["resource_requirements"] = resources
    response = api.post("/api/v1/tasks", request, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not TaskDefinition.platform.exists()


def test_millicores_and_numbers_are_cores(api):
    for index, cpu in enumerate(["500m", 1.5, 2]):
        request = {**task_request(), "name": f"cores-{index}"}
        request["handler"]["resource_requirements"] = {"cpu": cpu, "memory": "512Mi"}
        response = api.post("/api/v1/tasks", request, format="json")
        assert response.status_code == 201, response.content
        assert response.json()["handler"]["resource_requirements"]["cpu"] == cpu


def test_a_shell_handler_refuses_cores_but_takes_a_memory_quantity(api):
    shell = {"type": "shell", "command": ["true"]}
    request = {**task_request(), "handler": {**shell, "resource_requirements": {"cpu": "1"}}}
    refused = api.post("/api/v1/tasks", request, format="json")
    assert refused.status_code == 400
    assert refused.json()["field"] == "handler.resource_requirements.cpu"
    request["handler"]["resource_requirements"] = {"memory": "512Mi"}
    assert api.post("/api/v1/tasks", request, format="json").status_code == 201


def test_two_different_timeouts_are_refused(api):
    request = {**task_request(), "timeout_seconds": 60}
    response = api.post("/api/v1/tasks", request, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "handler.resource_requirements.timeout_seconds"


def test_the_timeout_limit_is_the_one_the_schema_advertises(api, settings):
    schema = json.loads(
        api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content
    )
    advertised = schema["components"]["schemas"]["TaskInputRequest"]["properties"][
        "timeout_seconds"
    ]["maximum"]
    request = {**task_request(), "name": "at-the-limit"}
    request["handler"]["resource_requirements"]["timeout_seconds"] = advertised
    assert api.post("/api/v1/tasks", request, format="json").status_code == 201
    request = {**task_request(), "name": "over-the-limit", "timeout_seconds": advertised + 1}
    del request["handler"]["resource_requirements"]["timeout_seconds"]
    assert api.post("/api/v1/tasks", request, format="json").status_code == 400


@pytest.mark.parametrize("instant_key", ["run_at", "scheduled_at"])
def test_one_shot_is_once(api, instant_key):
    request = {
        "name": f"one-shot-{instant_key}",
        "schedule": {"type": "one-shot", instant_key: "2099-01-01T00:00:00Z"},
        "handler": {"type": "python", "callable": "noop"},
    }
    response = api.post("/api/v1/tasks", request, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["schedule"]["type"] == "once"
    assert response.json()["next_fire_at"].startswith("2099-01-01T00:00:00")


def test_the_conditional_branching_dag_is_created_and_reads_back_as_written(api):
    response = api.post("/api/v1/dags", dag_definition(), format="json")
    assert response.status_code == 201, response.content
    body = api.get(f"/api/v1/dags/{response.json()['id']}").json()
    assert body["name"] == "document-processing"
    nodes = {node["id"]: node for node in body["definition"]["tasks"]}
    for written in dag_definition()["tasks"]:
        node = nodes[written["id"]]
        assert node["handler"] == written["handler"]
        assert node.get("condition") == written.get("condition")
        assert node["depends_on"] == written.get("depends_on", [])


def test_a_string_handler_must_be_registered(api):
    definition = dag_definition()
    definition["tasks"][0]["handler"] = "NoSuchClassifier"
    response = api.post("/api/v1/dags", definition, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "tasks[0].handler"
    assert "NoSuchClassifier" in response.json()["message"]


def test_a_dag_node_nobody_can_run_yet_is_saved_with_a_warning(api):
    definition = {
        "dag": "boxed",
        "tasks": [
            {"id": "pack", "handler": {"type": "container", "image": "alpine:3"}},
            {"id": "tell", "handler": "noop", "depends_on": ["pack"]},
        ],
    }
    response = api.post("/api/v1/dags", definition, format="json")
    assert response.status_code == 201, response.content
    warnings = response.json()["warnings"]
    assert any(w.startswith("task 'pack'") and "'container'" in w for w in warnings)
