"""The runbook on the real stack: a failing task with pause_after_failures 2, run twice by the
shared prefork worker; the worker's finish counts the failures, enqueues the runbook, and
the same worker runs it (no health check: unknown health, so it pauses). The API shows the
pause record."""

from __future__ import annotations

import pytest

from scheduler_app.models import AuditEntry, TaskDefinition, TaskExecution
from tests.api_clients import jwt_client
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failing_task_run_twice_ends_paused_by_the_runbook(live_worker, tenant_and_user):
    tenant, admin = tenant_and_user
    api = jwt_client(admin)
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "always-failing",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "fail_permanently"},
            "retry_policy": {"max_attempts": 1},
            "policy": {"pause_after_failures": 2},
            "owner": f"user:{admin.username}",
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    try:
        for fired in (1, 2):
            run = api.post(f"/api/v1/tasks/{task_id}/trigger", {}, format="json")
            assert run.status_code in (200, 201, 202), run.content
            execution = TaskExecution.platform.get(id=run.json()["execution_id"])
            wait_until(
                lambda execution=execution: (
                    TaskExecution.platform.get(id=execution.id).status == "failed"
                ),
                timeout=60,
                message=f"run {fired} to fail",
            )
        wait_until(
            lambda: TaskDefinition.platform.get(id=task_id).paused,
            timeout=60,
            message="the runbook to pause the task",
        )
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    seen = api.get(f"/api/v1/tasks/{task_id}").json()
    assert seen["paused"] is True and seen["paused_by"] == "runbook"
    assert seen["pause_note"].startswith("paused by the runbook after 2 consecutive failures")
    assert AuditEntry.platform.filter(
        tenant=tenant, actor="runbook", action="runbook.pause"
    ).exists()
    assert not TaskExecution.platform.filter(task_id=task_id, trigger="runbook").exists()
