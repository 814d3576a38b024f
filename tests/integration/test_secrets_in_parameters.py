"""An operator (403 on /secrets) tries to read a secret through run parameters, and a task
prints a resolved secret in encoded forms: neither the plaintext nor any encoded form of it
reaches the run's log, in its text or its JSON form.

The task, authored by the tenant's admin, prints its parameters and the secret its handler
config references in plain, JSON, repr, URL-encoded and base64 forms, exactly what an attacker
would ask a handler to do."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.utils import timezone

from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from tests.api_clients import member_client
from tests.factories import make_queued_runs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# JSON and repr escape the quote, the backslash and the umlaut: their forms differ from it.
PLAINTEXT = 'db-P@ss"w\u00f6rd\\4711/+?'
PRINT_EVERY_FORM = r"""
import base64, json, os, sys
from urllib.parse import quote
for name, value in (("param", json.loads(os.environ["TASK_PARAMETERS"]).get("x", "")),
                    ("config", os.environ.get("FROM_CONFIG", ""))):
    raw = value.encode()
    print(name, "plain", value)
    print(name, "json", json.dumps(value))
    print(name, "repr", repr(value))
    print(name, "url", quote(value, safe=""))
    print(name, "base64", base64.b64encode(raw).decode())
    print(name, "base64-in-text", base64.b64encode(b"token: " + raw + b"\n").decode())
    print(name, "hex", raw.hex())
"""


def _forbidden_forms() -> list[str]:
    raw = PLAINTEXT.encode()
    return [
        PLAINTEXT,
        json.dumps(PLAINTEXT)[1:-1],
        repr(PLAINTEXT)[1:-1],
        quote(PLAINTEXT, safe=""),
        base64.b64encode(raw).decode(),
        base64.b64encode(b"token: " + raw + b"\n").decode()[12:-8],  # the secret's own part
        raw.hex(),
    ]


@pytest.fixture
def printing_task(api, tenant):
    assert (
        api.post("/api/v1/secrets", {"name": "db-pass", "value": PLAINTEXT}, format="json")
    ).status_code == 201
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "prints-everything",
            "schedule": {"type": "manual"},
            "handler": {
                "type": "shell",
                "command": ["python3", "-c", PRINT_EVERY_FORM],
                "environment": {"FROM_CONFIG": "{{secret:db-pass}}"},
            },
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    return TaskDefinition.platform.get(id=created.json()["id"])


def _logs(client, execution_id: str) -> list[str]:
    return [
        client.get(f"/api/v1/executions/{execution_id}/logs?format=text").content.decode(),
        client.get(f"/api/v1/executions/{execution_id}/logs").content.decode(),
        client.get(f"/api/v1/executions/{execution_id}").content.decode(),
    ]


def _assert_nothing_leaks(bodies: list[str]) -> None:
    for body in bodies:
        for form in _forbidden_forms():
            assert form not in body, (form, body)


def test_an_operator_cannot_trigger_with_a_secret_reference(tenant, printing_task):
    operator, _ = member_client(tenant, "operator")
    assert operator.get("/api/v1/secrets").status_code == 403
    response = operator.post(
        f"/api/v1/tasks/{printing_task.id}/trigger",
        {"parameters": {"x": "{{secret:db-pass}}"}},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "parameters"
    assert PLAINTEXT not in response.content.decode()
    assert not TaskExecution.platform.filter(task=printing_task).exists()  # nothing ran


def test_a_dag_trigger_with_a_secret_reference_is_refused(api, tenant):
    created = api.post(
        "/api/v1/dags",
        {
            "dag": "one-node",
            "tasks": [{"id": "a", "handler": {"type": "shell", "command": ["true"]}}],
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    operator, _ = member_client(tenant, "operator")
    response = operator.post(
        f"/api/v1/dags/{created.json()['id']}/trigger",
        {"parameters": {"x": "{{ secret:db-pass }}"}},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "parameters"


@pytest.mark.needs_os_tool("bubblewrap")
def test_references_in_run_parameters_stay_literal_and_resolved_values_are_masked_in_every_form(
    api, tenant, printing_task, live_worker
):
    # Parameters that did not come from the task's author (here a run row written directly,
    # as any path other than the refusing trigger would leave it) are never resolved.
    operator, _ = member_client(tenant, "operator")
    [run] = make_queued_runs(
        printing_task,
        1,
        queue="normal",
        due=timezone.now() - timedelta(seconds=1),
        parameters={"x": "{{secret:db-pass}}"},
    )
    ring([Doorbell(str(run.id), str(tenant.id), run.queue)])
    wait_until(
        lambda: TaskExecution.platform.get(id=run.id).status in ("success", "failed"),
        timeout=60,
        message="the run ended",
    )
    assert TaskExecution.platform.get(id=run.id).status == "success"
    text = operator.get(f"/api/v1/executions/{run.id}/logs?format=text").content.decode()
    assert "param plain {{secret:db-pass}}" in text  # literal: the reference was not resolved
    assert "config plain ****" in text  # the admin's own reference was, and is masked
    for form in ("json", "repr", "url", "base64", "hex"):
        assert f"config {form} " in text
    _assert_nothing_leaks(_logs(operator, str(run.id)))
