"""A DAG node takes `idempotency_key` like a task: validated when the DAG is saved, and
carried by the hidden task that runs the node."""

from __future__ import annotations

import pytest

from dags.models import Dag, DagVersion
from scheduler_app.models import TaskDefinition

pytestmark = pytest.mark.django_db


def test_a_node_key_reaches_its_task(api):
    definition = {
        "dag": "keyed",
        "tasks": [{"id": "load", "handler": "noop", "idempotency_key": "{{scheduled_date}}"}],
    }
    response = api.post("/api/v1/dags", definition, format="json")
    assert response.status_code == 201, response.content
    version = DagVersion.objects.get(dag_id=response.json()["id"])
    task = TaskDefinition.platform.get(id=version.node_tasks["load"])
    assert task.idempotency_key == "{{scheduled_date}}"


def test_a_bad_node_key_is_refused_naming_the_node(api):
    definition = {
        "dag": "keyed",
        "tasks": [{"id": "load", "handler": "noop", "idempotency_key": "{{secret:x}}"}],
    }
    response = api.post("/api/v1/dags", definition, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "tasks[0].idempotency_key"
    assert not Dag.platform.exists()


def test_a_task_refuses_a_bad_key_and_clears_one_with_an_empty_string(api):
    body = {
        "name": "t",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
        "idempotency_key": "always-the-same",
    }
    refused = api.post("/api/v1/tasks", body, format="json")
    assert refused.status_code == 400 and refused.json()["field"] == "idempotency_key"
    created = api.post(
        "/api/v1/tasks", {**body, "idempotency_key": "{{scheduled_at}}"}, format="json"
    )
    assert created.status_code == 201, created.content
    cleared = api.patch(
        f"/api/v1/tasks/{created.json()['id']}", {"idempotency_key": ""}, format="json"
    )
    assert cleared.status_code == 200 and cleared.json()["idempotency_key"] == ""
