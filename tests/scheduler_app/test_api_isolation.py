"""Tenants are walls: walk EVERY route of the URL map with EVERY method, as tenant A, aimed at
tenant B's objects. Any 2xx on B's ids, any 5xx, any of B's identifiers in a body, or any
change to B's data fails. Routes added later (any branch) are walked automatically: a path
argument the walker has no B object for gets a random id and must not answer 2xx either.
"""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from alerting.models import AlertIncident
from alerting.services.channels import channel_create
from alerting.services.incidents import incident_open
from runs.finish import run_finish
from scheduler_app.models import (
    ApiKey,
    ExecutionLog,
    Pool,
    Secret,
    TaskDefinition,
    TaskExecution,
)
from scheduler_app.services.api_keys import api_key_create
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.pools import pool_create
from scheduler_app.services.secrets import secret_create
from scheduler_app.services.task_definitions import task_trigger
from tests.api_clients import api_key_client, jwt_client, member_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
MARKER = "zz-tenant-b-private"


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern


def api_routes():
    for route, pattern in _walk(get_resolver().url_patterns):
        if route.startswith("api/v1/") and not route.startswith("api/v1/auth/"):
            view_class = getattr(pattern.callback, "view_class", None) or getattr(
                pattern.callback, "cls", None
            )
            yield route, view_class


@pytest.fixture
def tenant_b(tenant_factory):
    tenant, _admin = tenant_factory("bravo")
    task = make_task(
        tenant,
        name=f"{MARKER}-task",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "noop"},
        tags=[MARKER],
    )
    execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status="failed", error_message=MARKER, transient=False),
        log_text=f"{MARKER} log line",
    )
    secret = secret_create(tenant=tenant, name=f"{MARKER}-secret", value="b-secret-value")
    key, _ = api_key_create(tenant=tenant, name=f"{MARKER}-key", role="admin")
    _, viewer = member_client(tenant, "viewer", username=f"{MARKER}-viewer")
    member = viewer.memberships.get()
    channel = channel_create(
        tenant=tenant,
        name=f"{MARKER}-hook",
        kind="webhook",
        url=f"https://{MARKER}.example.com/hook",
        signing_secret="b-signing-secret",
    )
    incident = incident_open(
        rule="task_failing", key=str(task.id), tenant=tenant, summary=f"task {MARKER} is failing"
    )
    pool = pool_create(tenant=tenant, name=f"{MARKER}-pool", slots=3)
    ids = {
        "name": pool.name,  # a pool is found by its name (/pools/<name>)
        "incident_id": str(incident.id),
        "channel_id": str(channel.id),
        "task_id": str(task.id),
        "execution_id": str(execution.id),
        "secret_id": str(secret.id),
        "key_id": str(key.id),
        "member_id": str(member.id),
    }
    return tenant, ids


def _snapshot(tenant):
    return {
        "tasks": list(TaskDefinition.platform.filter(tenant=tenant).values().order_by("id")),
        "executions": list(TaskExecution.platform.filter(tenant=tenant).values().order_by("id")),
        "logs": list(ExecutionLog.platform.filter(tenant=tenant).values()),
        "secrets": list(Secret.platform.filter(tenant=tenant).values("id", "ciphertext")),
        "keys": list(ApiKey.platform.filter(tenant=tenant).values("id", "revoked_at")),
        "members": list(tenant.memberships.values("id", "role").order_by("id")),
        "channels": list(tenant.channels.values().order_by("id")),
        "incidents": list(AlertIncident.platform.filter(tenant=tenant).values().order_by("id")),
        "pools": list(Pool.platform.filter(tenant=tenant).values().order_by("id")),
    }


@pytest.mark.parametrize("credential", ["jwt", "api_key"])
def test_no_route_and_no_method_leaks_another_tenants_data(tenant_and_user, tenant_b, credential):
    tenant_a, admin_a = tenant_and_user
    make_task(tenant_a, name="a-task", schedule={"type": "manual"})
    other, b_ids = tenant_b
    if credential == "jwt":
        client = jwt_client(admin_a)
    else:
        _, raw_key = api_key_create(tenant=tenant_a, name="walker", role="admin")
        client = api_key_client(raw_key)
    before = _snapshot(other)
    # Integer ids (members) are too short to search for in a body; their routes are walked.
    forbidden_text = [MARKER, "bravo", *(value for value in b_ids.values() if len(value) >= 8)]
    walked = 0
    problems: list[str] = []
    for route, view_class in api_routes():
        arguments = re.findall(r"<(?:\w+:)?(\w+)>", route)
        url = "/" + route
        for name in arguments:
            url = re.sub(rf"<(?:\w+:)?{name}>", b_ids.get(name, str(uuid.uuid4())), url)
        for method in METHODS:
            if view_class is None or not hasattr(view_class, method):
                continue
            response = getattr(client, method)(url, {}, format="json")
            walked += 1
            body = response.content.decode(errors="replace") if not response.streaming else ""
            where = f"{method.upper()} {url} -> {response.status_code}"
            if response.status_code >= 500:
                problems.append(f"{where}: server error")
            if arguments and 200 <= response.status_code < 300:
                problems.append(f"{where}: answered on another tenant's id")
            if arguments and response.status_code not in (404, 403, 405):
                problems.append(f"{where}: expected 404")
            for text in forbidden_text:
                if text in body:
                    problems.append(f"{where}: body contains tenant B's {text!r}")
    assert not problems, "\n".join(problems)
    assert walked >= 25
    assert _snapshot(other) == before
