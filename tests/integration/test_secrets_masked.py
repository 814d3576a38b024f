"""A shell task prints a secret; the plaintext is nowhere in the database or the API."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PLAINTEXT = "s3cr3t-Plaintext-4711"


def _database_contains(text: str) -> list[str]:
    hits = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # table names come from the schema
            for row in cursor.fetchall():
                if any(text in str(value) for value in row):
                    hits.append(table)
                    break
    return hits


@pytest.mark.needs_os_tool("bubblewrap")
def test_printed_secret_is_masked_everywhere(api, live_worker):
    assert (
        api.post(
            "/api/v1/secrets", {"name": "db-password", "value": PLAINTEXT}, format="json"
        ).status_code
        == 201
    )
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "leaky",
            "schedule": {"type": "manual"},
            "handler": {
                "type": "shell",
                "command": [
                    "sh",
                    "-c",
                    'echo "password is $DB_PASSWORD"; echo "arg $0" >&2',
                    "{{secret:db-password}}",
                ],
                "environment": {"DB_PASSWORD": "{{secret:db-password}}"},
            },
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    execution_id = api.post(f"/api/v1/tasks/{task_id}/trigger", {}, format="json").json()[
        "execution_id"
    ]
    try:
        wait_until(
            lambda: TaskExecution.platform.get(id=execution_id).status == "success",
            timeout=30,
            message="the shell task succeeded",
        )
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    logs = api.get(f"/api/v1/executions/{execution_id}/logs?format=text").content.decode()
    assert "password is ****" in logs and "arg ****" in logs
    bodies = [
        logs,
        api.get(f"/api/v1/executions/{execution_id}/logs").content.decode(),
        api.get(f"/api/v1/executions/{execution_id}").content.decode(),
        api.get("/api/v1/executions").content.decode(),
        api.get(f"/api/v1/tasks/{task_id}").content.decode(),
        api.get("/api/v1/secrets").content.decode(),
        api.get("/api/v1/audit").content.decode(),
    ]
    assert not [body for body in bodies if PLAINTEXT in body]
    assert _database_contains(PLAINTEXT) == []


def test_unknown_secret_fails_the_run_permanently_without_running(api, live_worker):
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "missing-secret",
            "schedule": {"type": "manual"},
            "handler": {"type": "shell", "command": ["echo", "{{secret:nope}}"]},
        },
        format="json",
    )
    task_id = created.json()["id"]
    execution_id = api.post(f"/api/v1/tasks/{task_id}/trigger", {}, format="json").json()[
        "execution_id"
    ]
    wait_until(
        lambda: TaskExecution.platform.get(id=execution_id).status == "failed",
        timeout=30,
        message="the run failed",
    )
    execution = TaskExecution.platform.get(id=execution_id)
    assert execution.error_class == "secret" and "nope" in execution.error_message
    assert execution.dead_lettered
