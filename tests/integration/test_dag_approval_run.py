"""An approval node on a real worker, end to end: a -> sign-off (2 operators) -> b. The
worker runs a; the node waits holding no worker slot, and the worker mails the announcement
with each approver's link; b runs only once the second approval came, and starts after it."""

from __future__ import annotations

import pytest

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.models import DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.dags.approval_helpers import client_of, member
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = {"type": "python", "callable": "upstream_echo"}


def _status(run, node_id) -> str:
    return DagNodeState.objects.get(run=run, node_id=node_id).status


def test_b_runs_only_after_the_approvals(tenant, live_worker):
    alice, bob = member(tenant, "alice", "operator"), member(tenant, "bob", "operator")
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "gated",
            "tasks": [
                {"id": "a", "handler": ECHO},
                {
                    "id": "sign-off",
                    "type": "approval",
                    "depends_on": ["a"],
                    "approvers": {"role": "operator", "count": 2},
                    "timeout": "1h",
                },
                {"id": "b", "handler": ECHO, "depends_on": ["sign-off"]},
            ],
        },
    )
    run = dag_trigger(dag=dag, triggered_by="user:acme-admin")
    try:
        wait_until(
            lambda: _status(run, "sign-off") == "waiting_for_approval",
            timeout=30,
            message="a to run and the approval to wait",
        )
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    assert _status(run, "a") == "success" and _status(run, "b") == "waiting"
    # The worker announced it: a mail to each approver with their own link (the console mail
    # backend of the worker's settings prints it).
    wait_until(
        lambda: (
            "Approval needed: gated / sign-off" in live_worker.log()
            and "Approve or reject as alice: http" in live_worker.log()
        ),
        timeout=30,
        message="the announcement to be mailed",
    )
    approval = ApprovalWait.platform.get(run=run)
    first = client_of(alice).post(
        f"/api/v1/approvals/{approval.id}/approve", {"comment": "ok"}, format="json"
    )
    assert first.status_code == 200 and first.json()["released"] is False
    # One approval of two: b is not dispatched (the node releases nothing yet).
    assert _status(run, "b") == "waiting"
    assert DagNodeState.objects.get(run=run, node_id="b").execution_id is None
    second = client_of(bob).post(
        f"/api/v1/approvals/{approval.id}/approve", {"comment": "ship it"}, format="json"
    )
    assert second.status_code == 200 and second.json()["released"] is True
    wait_until(
        lambda: DagRun.platform.get(id=run.id).status != "running",
        timeout=30,
        message="b to run and the run to end",
    )
    assert DagRun.platform.get(id=run.id).status == "success"
    b = DagNodeState.objects.get(run=run, node_id="b")
    assert b.status == "success"
    # b's upstream result is the approval's: the decisions.
    assert [d["user"] for d in b.result["upstream"]["sign-off"]["decisions"]] == ["alice", "bob"]
    released_at = ApprovalDecision.objects.get(username="bob").decided_at
    execution = TaskExecution.platform.get(root_execution_id=b.execution_id)
    assert execution.started_at >= released_at
