"""`schedctl incidents`, `ack` and `resolve` as real processes against the live API: an operator
lists what fired in words, acknowledges it and resolves it with a note; a viewer's `ack` is
refused and changes nothing."""

from __future__ import annotations

import json

import pytest

from alerting.models import AlertIncident
from alerting.services.incidents import incident_open
from tests.cli.conftest import run_schedctl
from tests.dags.approval_helpers import member
from tests.factories import make_task

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_schedctl_lists_acknowledges_and_resolves_an_incident(live_server, cli_env):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    member(tenant, "alice", "operator")
    member(tenant, "victor", "viewer")
    task = make_task(tenant, name="nightly-report", schedule={"type": "manual"})
    incident = incident_open(
        rule="task_failing",
        key=str(task.id),
        tenant=tenant,
        summary="task nightly-report is failing",
    )

    _ok(run_schedctl("login", "--url", live_server.url, "-u", "victor", env=cli_env))
    refused = run_schedctl("ack", str(incident.id), env=cli_env)
    assert refused.returncode == 1 and "error:" in refused.stderr + refused.stdout
    assert AlertIncident.platform.get(id=incident.id).acknowledged_at is None

    _ok(run_schedctl("login", "--url", live_server.url, "-u", "alice", env=cli_env))
    table = _ok(run_schedctl("incidents", "--state", "open", env=cli_env))
    assert "Task failing" in table and "nightly-report" in table and str(incident.id) in table
    acked = _ok(run_schedctl("ack", str(incident.id), env=cli_env))
    assert (
        f"acknowledged Task failing: nightly-report (incident {incident.id}, by user:alice)"
        in acked
    )
    assert (
        json.loads(_ok(run_schedctl("incidents", "--state", "open", "-o", "json", env=cli_env)))
        == []
    )
    _ok(run_schedctl("resolve", str(incident.id), "-m", "rolled back", env=cli_env))
    resolved = AlertIncident.platform.get(id=incident.id)
    assert (resolved.resolved_by, resolved.resolution_note) == ("user:alice", "rolled back")
