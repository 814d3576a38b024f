"""Strict input: every write endpoint of the API refuses keys it does not know, with a 400
that names each of them, and changes nothing. The URL map is walked (like the isolation
test), so an endpoint added later is held to it too."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from alerting.models import NotificationChannel
from alerting.services.channels import channel_create
from alerting.services.incidents import incident_open
from dags.models import Dag, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from runs.finish import run_finish
from scheduler_app.models import ApiKey, Pool, Secret, TaskDefinition, TaskExecution
from scheduler_app.services.api_keys import api_key_create
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.pools import pool_create
from scheduler_app.services.secrets import secret_create
from scheduler_app.services.task_definitions import task_trigger
from tests.api_clients import member_client
from tests.factories import make_task
from tests.scheduler_app.test_api_isolation import api_routes

pytestmark = pytest.mark.django_db

WRITE_METHODS = ("post", "put", "patch", "delete")
UNKNOWN = {"zz_not_a_field": 1, "max_retries": 5}


@pytest.fixture
def own_objects(tenant):
    task = make_task(
        tenant,
        name="strict-task",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "noop"},
        retry_policy={"max_attempts": 1},
    )
    execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status="failed", error_message="boom", transient=False),
        log_text="",
    )
    secret = secret_create(tenant=tenant, name="strict-secret", value="v")
    key, _ = api_key_create(tenant=tenant, name="strict-key", role="viewer")
    _, viewer = member_client(tenant, "viewer", username="strict-viewer")
    dag = dag_create(
        tenant=tenant,
        raw={"dag": "strict-dag", "tasks": [{"id": "a", "handler": "noop"}]},
    )
    run = dag_trigger(dag=dag)
    channel = channel_create(
        tenant=tenant, name="strict-hook", kind="webhook", url="https://hooks.example.com/x"
    )
    incident = incident_open(
        rule="task_failing", key=str(task.id), tenant=tenant, summary="task strict is failing"
    )
    pool = pool_create(tenant=tenant, name="strict-pool", slots=2)
    return {
        "name": pool.name,
        "incident_id": str(incident.id),
        "channel_id": str(channel.id),
        "task_id": str(task.id),
        "execution_id": str(execution.id),
        "secret_id": str(secret.id),
        "key_id": str(key.id),
        "member_id": str(viewer.memberships.get().id),
        "dag_id": str(dag.id),
        "run_id": str(run.id),
        # Endpoints that take no body refuse it before they look the object up.
        "invitation_id": str(uuid.uuid4()),
        "action": "accept",
        "backfill_id": str(uuid.uuid4()),
        "approval_id": "1",
        "node_id": "a",
    }


def _snapshot(tenant) -> dict:
    return {
        "tasks": list(TaskDefinition.platform.filter(tenant=tenant).values().order_by("id")),
        "executions": list(TaskExecution.platform.filter(tenant=tenant).values().order_by("id")),
        "secrets": list(Secret.platform.filter(tenant=tenant).values().order_by("id")),
        "pools": list(Pool.platform.filter(tenant=tenant).values().order_by("id")),
        "keys": list(ApiKey.platform.filter(tenant=tenant).values().order_by("id")),
        "members": list(tenant.memberships.values("id", "role").order_by("id")),
        "dags": list(Dag.platform.filter(tenant=tenant).values().order_by("id")),
        "runs": list(DagRun.platform.filter(dag__tenant=tenant).values().order_by("id")),
        "channels": list(
            NotificationChannel.platform.filter(tenant=tenant).values().order_by("id")
        ),
    }


def test_every_write_endpoint_refuses_unknown_fields_naming_each(tenant, own_objects):
    # A platform-staff admin of the tenant may call every endpoint, so each answers on
    # the body rather than on who asks.
    client, _ = member_client(tenant, "admin", username="strict-staff", staff=True)
    before = _snapshot(tenant)
    walked, problems = 0, []
    for route, view_class in api_routes():
        url = "/" + route
        for name in re.findall(r"<(?:\w+:)?(\w+)>", route):
            url = re.sub(rf"<(?:\w+:)?{name}>", own_objects[name], url)
        for method in WRITE_METHODS:
            if view_class is None or not hasattr(view_class, method):
                continue
            response = getattr(client, method)(url, UNKNOWN, format="json")
            walked += 1
            where = f"{method.upper()} {url} -> {response.status_code}"
            if response.status_code != 400:
                problems.append(f"{where}: expected 400 {response.content[:200]!r}")
                continue
            body = response.json()
            named = set(body.get("errors") or {}) | {
                name for name in UNKNOWN if name in body["message"]
            }
            missing = set(UNKNOWN) - named
            if missing:
                problems.append(f"{where}: does not name {sorted(missing)}: {body}")
    assert not problems, "\n".join(problems)
    assert walked >= 25
    assert _snapshot(tenant) == before


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("", "idempotent"),
        ("schedule", "schedule.every"),
        ("retry_policy", "retry_policy.max_retries"),
        ("policy", "policy.catchup_window"),
        ("handler", "handler.shell"),
    ],
)
def test_a_task_refuses_an_unknown_key_at_any_depth(api, where, field):
    body = {
        "name": "strict",
        "schedule": {"type": "interval", "expression": "1m"},
        "handler": {"type": "python", "callable": "noop"},
        "retry_policy": {"max_attempts": 2},
        "policy": {"catchup": "none"},
    }
    target = body[where] if where else body
    target[field.rsplit(".", 1)[-1]] = True
    response = api.post("/api/v1/tasks", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert not TaskDefinition.platform.exists()


def test_a_dag_refuses_unknown_keys_at_the_top_and_in_nodes(api):
    top = {"dag": "d", "tasks": [{"id": "a", "handler": "noop"}], "retries": 3}
    response = api.post("/api/v1/dags", top, format="json")
    assert response.status_code == 400 and "retries" in response.json()["message"]
    node = {"dag": "d", "tasks": [{"id": "a", "handler": "noop", "retries": 3}]}
    response = api.post("/api/v1/dags", node, format="json")
    assert response.status_code == 400 and "retries" in response.json()["message"]
    assert not Dag.platform.exists()


def test_the_schema_says_request_bodies_refuse_unknown_keys(api):
    schema = json.loads(
        api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content
    )["components"]["schemas"]
    for name in ("TaskInputRequest", "ScheduleInputRequest", "RetryPolicyInputRequest"):
        assert schema[name]["additionalProperties"] is False, name
    assert schema["PatchedTaskInputRequest"]["additionalProperties"] is False
