"""`--reason` (or `--note`) on schedctl's pause, cancel, delete and `dlq delete`, as real
processes against the live API: the reason reaches the audit entry, which names the user,
the object, what changed and that it came from the CLI. No worker: nothing here runs."""

from __future__ import annotations

import pytest

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import AuditEntry, TaskDefinition
from tests.cli.conftest import PASSWORD, run_schedctl
from tests.dashboard.conftest import add_execution
from tests.factories import make_task

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _entry(verb: str, object_id) -> AuditEntry:
    [entry] = AuditEntry.platform.filter(action=verb, object_id=str(object_id))
    assert entry.actor == "user:acme-admin" and entry.detail["via"] == "cli"
    return entry


def test_pause_cancel_delete_and_dismiss_carry_their_reason_to_the_audit_log(live_server, cli_env):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password=PASSWORD)
    _ok(run_schedctl("login", "--url", live_server.url, "--username", "acme-admin", env=cli_env))
    task = make_task(tenant, name="nightly")
    queued = add_execution(task, minutes_ago=0, status=ExecutionStatus.QUEUED)
    dead = add_execution(
        task, minutes_ago=5, status=ExecutionStatus.FAILED, error_class="boom", dead_lettered=True
    )

    _ok(run_schedctl("pause", "nightly", "--reason", "warehouse migration", env=cli_env))
    paused = _entry("task.pause", task.id)
    assert paused.detail["reason"] == "warehouse migration"
    assert (paused.detail["before"], paused.detail["after"]) == (
        {"paused": False},
        {"paused": True},
    )

    _ok(run_schedctl("cancel", str(queued.id), "--reason", "wrong input file", env=cli_env))
    cancelled = _entry("execution.cancel", queued.id)
    assert cancelled.detail["reason"] == "wrong input file"
    assert cancelled.detail["after"] == {"status": "cancelled"}

    _ok(run_schedctl("dlq", "delete", str(dead.id), "--note", "known bad row", env=cli_env))
    assert _entry("dlq.delete", dead.id).detail["reason"] == "known bad row"

    _ok(run_schedctl("delete", "nightly", "--yes", "--reason", "replaced by v2", env=cli_env))
    assert TaskDefinition.platform.get(id=task.id).deleted_at is not None
    assert _entry("task.delete", task.id).detail["reason"] == "replaced by v2"
    # One entry per action, nothing else (the login is no write of the tenant's).
    assert AuditEntry.platform.filter(tenant=tenant).count() == 4
