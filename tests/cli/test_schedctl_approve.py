"""`schedctl approvals`, `approve` and `reject` as real processes against the live API: an
operator lists what waits and approves it with a comment (the decision says it came from the
CLI), then rejects another run's with a reason, which the node keeps as its error. Who may
not decide is the API's to refuse (tests/dags/test_approvals.py). No worker: the node after
the approval is only dispatched."""

from __future__ import annotations

import json

import pytest

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import AuditEntry
from tests.cli.conftest import run_schedctl
from tests.dags.approval_helpers import member, release_dag

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_schedctl_approve_releases_the_node_and_reject_fails_it(live_server, cli_env):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    member(tenant, "alice", "operator")
    dag = dag_create(tenant=tenant, raw=release_dag(approvers={"role": "operator", "count": 1}))
    run = dag_trigger(dag=dag, triggered_by="user:acme-admin")
    approval_id = str(ApprovalWait.platform.get(run=run).id)

    _ok(run_schedctl("login", "--url", live_server.url, "-u", "alice", env=cli_env))
    listed = json.loads(_ok(run_schedctl("approvals", "-o", "json", env=cli_env)))
    assert [(a["id"], a["node_id"], a["message"]) for a in listed] == [
        (approval_id, "sign-off", "Ship the release?")
    ]
    approved = _ok(run_schedctl("approve", approval_id, "-m", "release notes read", env=cli_env))
    assert f"approved sign-off of release (approval {approval_id})" in approved
    assert "released (approved)" in approved
    decision = ApprovalDecision.objects.get()
    assert (decision.username, decision.via, decision.comment) == (
        "alice",
        "cli",
        "release notes read",
    )
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "success"
    # A reject needs its reason; with one, the node fails with it as its error, and the
    # decision is in the audit log as the CLI's.
    second = dag_trigger(dag=dag, triggered_by="user:acme-admin")
    second_id = str(ApprovalWait.platform.get(run=second).id)
    bare = run_schedctl("reject", second_id, env=cli_env)
    assert bare.returncode != 0 and "--comment" in bare.stderr
    rejected = _ok(run_schedctl("reject", second_id, "-m", "numbers are off", env=cli_env))
    assert f"rejected sign-off of release (approval {second_id})" in rejected
    node = DagNodeState.objects.get(run=second, node_id="sign-off")
    assert (node.status, node.error_message) == ("failed", "rejected by alice: numbers are off")
    entry = AuditEntry.platform.get(action="approval.reject")
    assert (entry.actor, entry.object_id, entry.detail["comment"]) == (
        "user:alice",
        second_id,
        "numbers are off",
    )
