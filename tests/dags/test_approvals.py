"""Approval nodes through the API on real PostgreSQL: the quorum, who may not decide (the
run's triggerer, a viewer, an API key, the same user twice), tenants as walls, a rejection
under the failure policy, the timeout, the audit log and bad definitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.models import Dag, DagNodeExecution, DagNodeState, DagRun
from dags.services.approvals import approval_waits_expire
from scheduler_app.models import AuditEntry
from tests.dags.approval_helpers import client_of, member, release_dag

pytestmark = pytest.mark.django_db


def _state(run_id, node_id) -> DagNodeState:
    return DagNodeState.objects.get(run_id=run_id, node_id=node_id)


@pytest.fixture
def people(tenant):
    return {
        "alice": member(tenant, "alice", "operator"),
        "bob": member(tenant, "bob", "operator"),
        "carol": member(tenant, "carol", "admin"),
        "vera": member(tenant, "vera", "viewer"),
    }


def _started(api, raw=None) -> tuple[str, str, str]:
    """(dag id, run id, approval id) of a run triggered by the tenant's admin."""
    created = api.post("/api/v1/dags", raw or release_dag(), format="json")
    assert created.status_code == 201, created.content
    dag_id = created.json()["id"]
    run = api.post(f"/api/v1/dags/{dag_id}/trigger", {}, format="json")
    assert run.status_code == 202, run.content
    run_id = run.json()["id"]
    assert run.json()["triggered_by"] == "user:acme-admin"
    assert _state(run_id, "sign-off").status == "waiting_for_approval"
    assert _state(run_id, "sign-off").execution_id is None  # nothing runs, no worker slot
    approval_id = str(ApprovalWait.platform.get(run_id=run_id).id)
    return dag_id, run_id, approval_id


def test_two_operators_release_the_node_and_the_decisions_are_its_result(api, people):
    dag_id, run_id, approval_id = _started(api)
    pending = api.get("/api/v1/approvals").json()
    assert [(a["id"], a["approvals"], a["approvers"]["count"]) for a in pending["results"]] == [
        (approval_id, 0, 2)
    ]
    alice = client_of(people["alice"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {"comment": "tests green"}, format="json"
    )
    assert alice.status_code == 200, alice.content
    assert alice.json()["released"] is False and alice.json()["approvals"] == 1
    assert _state(run_id, "sign-off").status == "waiting_for_approval"
    # The same user counts once, whichever route it takes.
    again = client_of(people["alice"]).post(
        f"/api/v1/dags/{dag_id}/executions/{run_id}/nodes/sign-off/approve", {}, format="json"
    )
    assert again.status_code == 409 and "already decided" in again.json()["message"]
    # carol is an admin: a higher role than the one asked counts.
    carol = client_of(people["carol"]).post(
        f"/api/v1/dags/{dag_id}/executions/{run_id}/nodes/sign-off/approve",
        {"comment": "go", "via": "cli"},
        format="json",
    )
    assert carol.status_code == 200, carol.content
    assert carol.json()["released"] is True and carol.json()["status"] == "approved"
    node = _state(run_id, "sign-off")
    assert node.status == "success"
    assert [
        (d["user"], d["verdict"], d["comment"], d["via"]) for d in node.result["decisions"]
    ] == [
        ("alice", "approve", "tests green", "api"),
        ("carol", "approve", "go", "cli"),
    ]
    # Released: ship was dispatched (once), notify too.
    assert DagNodeExecution.objects.filter(run_id=run_id, node_id="ship").count() == 1
    assert _state(run_id, "ship").status in ("pending", "queued")
    assert api.get("/api/v1/approvals").json()["count"] == 0
    # Closed: a late decision changes nothing.
    late = client_of(people["bob"]).post(
        f"/api/v1/approvals/{approval_id}/reject", {"comment": "wait"}, format="json"
    )
    assert late.status_code == 409
    assert _state(run_id, "sign-off").status == "success"
    # Each decision is in the audit log, in words, with its comment.
    entries = AuditEntry.platform.filter(action__startswith="approval.").order_by("id")
    assert [(e.actor, e.action, e.object_id, e.detail["comment"]) for e in entries] == [
        ("user:alice", "approval.approve", approval_id, "tests green"),
        ("user:carol", "approval.approve", approval_id, "go"),
    ]
    summary = entries[0].detail["summary"]
    assert summary.startswith("alice approved node 'sign-off' of run ") and "tests green" in summary
    detail = api.get(f"/api/v1/dags/{dag_id}/executions/{run_id}").json()
    assert detail["approvals"][0]["status"] == "approved"
    assert [d["user"] for d in detail["approvals"][0]["decisions"]] == ["alice", "carol"]


def test_the_triggerer_a_viewer_and_an_api_key_cannot_approve(api, tenant, people):
    _dag_id, run_id, approval_id = _started(api)
    own = api.post(f"/api/v1/approvals/{approval_id}/approve", {}, format="json")
    assert own.status_code == 403 and "you triggered this run" in own.json()["message"]
    viewer = client_of(people["vera"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {}, format="json"
    )
    assert viewer.status_code == 403
    key = api.post("/api/v1/api-keys", {"name": "ci", "role": "admin"}, format="json")
    assert key.status_code == 201, key.content
    machine = client_of(people["alice"])
    machine.force_authenticate(user=None)
    machine.credentials(HTTP_AUTHORIZATION=f"Api-Key {key.json()['key']}")
    refused = machine.post(f"/api/v1/approvals/{approval_id}/approve", {}, format="json")
    assert refused.status_code == 403 and "API key" in refused.json()["message"]
    # Nothing of theirs counted.
    assert not ApprovalDecision.objects.exists()
    assert _state(run_id, "sign-off").status == "waiting_for_approval"
    assert not AuditEntry.platform.filter(action__startswith="approval.").exists()


def test_named_approvers_only(api, tenant, people):
    raw = release_dag(approvers={"users": ["alice", "carol"], "count": 1})
    _, _run_id, approval_id = _started(api, raw)
    bob = client_of(people["bob"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {}, format="json"
    )
    assert bob.status_code == 403 and "named approvers" in bob.json()["message"]
    alice = client_of(people["alice"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {}, format="json"
    )
    assert alice.status_code == 200 and alice.json()["released"] is True


def test_another_tenants_approval_is_a_404(api, tenant_factory, people):
    dag_id, run_id, approval_id = _started(api)
    _, intruder = tenant_factory("globex")
    attacker = client_of(intruder)
    assert attacker.get("/api/v1/approvals").json()["count"] == 0
    for path in (
        f"/api/v1/approvals/{approval_id}",
        f"/api/v1/approvals/{approval_id}/approve",
        f"/api/v1/dags/{dag_id}/executions/{run_id}/nodes/sign-off/approve",
    ):
        answer = (
            attacker.post(path, {}, format="json")
            if path.endswith("approve")
            else attacker.get(path)
        )
        assert answer.status_code == 404, (path, answer.content)
        assert approval_id not in answer.content.decode() or path.endswith(approval_id)
        assert "sign-off" not in answer.content.decode()
    assert not ApprovalDecision.objects.exists()


def test_a_rejection_fails_the_node_and_the_failure_policy_skips_downstream(api, people):
    dag_id, run_id, _approval_id = _started(api)
    rejected = client_of(people["bob"]).post(
        f"/api/v1/dags/{dag_id}/executions/{run_id}/nodes/sign-off/reject",
        {"comment": "the changelog is missing"},
        format="json",
    )
    assert rejected.status_code == 200, rejected.content
    assert rejected.json()["status"] == "rejected" and rejected.json()["released"] is True
    node = _state(run_id, "sign-off")
    assert node.status == "failed"
    assert node.error_message == "rejected by bob: the changelog is missing"
    assert _state(run_id, "ship").status == "upstream_failed"
    assert _state(run_id, "notify").status in ("pending", "queued")  # all_done: it runs
    entry = AuditEntry.platform.get(action="approval.reject")
    assert entry.actor == "user:bob" and entry.detail["verb"] == "rejected"
    assert entry.detail["comment"] == "the changelog is missing"


@pytest.mark.parametrize(
    ("policy", "run_status", "ship_status", "notify_status"),
    [
        # fail_all: the rejection ends the run; nothing after it runs.
        ("fail_all", "failed", "cancelled", "cancelled"),
        # continue: a failed upstream blocks nobody; both successors are dispatched.
        ("continue", "running", "dispatched", "dispatched"),
    ],
)
def test_a_rejection_follows_the_dags_other_failure_policies(
    api, people, policy, run_status, ship_status, notify_status
):
    _, run_id, approval_id = _started(api, {**release_dag(), "failure_policy": policy})
    rejected = client_of(people["bob"]).post(
        f"/api/v1/approvals/{approval_id}/reject", {"comment": "not today"}, format="json"
    )
    assert rejected.status_code == 200, rejected.content
    assert _state(run_id, "sign-off").status == "failed"
    assert DagRun.platform.get(id=run_id).status == run_status
    for node_id, expected in (("ship", ship_status), ("notify", notify_status)):
        status = _state(run_id, node_id).status
        if expected == "dispatched":
            assert status in ("pending", "queued"), (node_id, status)
        else:
            assert status == expected, (node_id, status)


@pytest.mark.parametrize(
    ("on_timeout", "node_status", "ship_status"),
    [("reject", "failed", "upstream_failed"), ("skip", "skipped", "skipped")],
)
def test_the_timeout_ends_the_wait_by_on_timeout(api, people, on_timeout, node_status, ship_status):
    _, run_id, approval_id = _started(api, release_dag(timeout="2h", on_timeout=on_timeout))
    wait = ApprovalWait.platform.get(id=approval_id)
    assert wait.deadline - wait.started_at == timedelta(hours=2)
    # The clock is the chore's argument: just before the deadline nothing ends.
    assert approval_waits_expire(now=wait.deadline - timedelta(seconds=1)) == 0
    assert _state(run_id, "sign-off").status == "waiting_for_approval"
    assert approval_waits_expire(now=wait.deadline + timedelta(seconds=1)) == 1
    assert _state(run_id, "sign-off").status == node_status
    assert _state(run_id, "ship").status == ship_status
    assert ApprovalWait.platform.get(id=approval_id).status == (
        "rejected" if on_timeout == "reject" else "skipped"
    )
    if on_timeout == "reject":
        assert "no decision within 7200 s" in _state(run_id, "sign-off").error_message
    late = client_of(people["alice"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {}, format="json"
    )
    assert late.status_code == 409
    assert approval_waits_expire(now=wait.deadline + timedelta(days=1)) == 0  # once


def test_a_cancelled_run_closes_its_approval(api, people):
    dag_id, run_id, approval_id = _started(api)
    assert api.post(f"/api/v1/dags/{dag_id}/executions/{run_id}/cancel").status_code == 200
    assert api.get("/api/v1/approvals").json()["count"] == 0
    late = client_of(people["alice"]).post(
        f"/api/v1/approvals/{approval_id}/approve", {}, format="json"
    )
    assert late.status_code == 409
    assert DagRun.platform.get(id=run_id).status == "cancelled"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"approvers": None}, "tasks[0].approvers"),
        ({"approvers": {"role": "operator", "count": 0}}, "tasks[0].approvers.count"),
        ({"approvers": {"role": "operator", "count": 5}}, "tasks[0].approvers.count"),
        ({"approvers": {"role": "release-manager"}}, "tasks[0].approvers.role"),
        ({"approvers": {"role": "viewer"}}, "tasks[0].approvers.role"),
        ({"approvers": {"users": ["alice", "mallory"]}}, "tasks[0].approvers.users"),
        ({"approvers": {"users": ["vera"]}}, "tasks[0].approvers.users"),
        ({"on_timeout": "escalate"}, "tasks[0].on_timeout"),
        ({"timeout": "91d"}, "tasks[0].timeout"),
        ({"timeout": "soon"}, "tasks[0].timeout"),
        ({"handler": {"type": "python", "callable": "noop"}}, "tasks[0].handler"),
        ({"type": "vote"}, "tasks[0].type"),
    ],
)
def test_a_bad_approval_node_is_a_400_naming_the_field(api, people, change, field):
    raw = release_dag()
    node = {k: v for k, v in {**raw["tasks"][0], **change}.items() if v is not None}
    raw["tasks"][0] = node
    answer = api.post("/api/v1/dags", raw, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == field, answer.json()
    assert not Dag.platform.exists()
