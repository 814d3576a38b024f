"""A DAG node that ran out of attempts lands in the dead-letter queue; retrying it from the
dashboard re-runs it inside its run (real PostgreSQL, Redis and Celery worker), so the run
finishes instead of staying partially completed."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from dags.models import DagNodeAttempt, DagNodeExecution, DagNodeState, DagRun
from scheduler_app.models import TaskExecution
from tests.integration.test_dag_runs import ONCE, node, run_dag
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("bubblewrap")]


# A shell task sees nothing of the host (its sandbox), so the gate cannot wait for a flag file
# the test writes: it fails until a moment the test then waits for, and succeeds after it. The
# moment leaves the first run ample time on a loaded machine; the test checks it did fail.
GATE_OPENS_AFTER_SECONDS = 25.0


def _gate_opening_later() -> tuple[dict, float]:
    opens_at = time.time() + GATE_OPENS_AFTER_SECONDS
    gate = {
        "type": "shell",
        "command": [
            "python3",
            "-c",
            f"import sys,time; sys.exit(0 if time.time() >= {opens_at} else 3)",
        ],
    }
    return gate, opens_at


def _wait_for(opens_at: float) -> None:
    time.sleep(max(0.0, opens_at - time.time()) + 0.5)


def test_retrying_a_dead_lettered_node_finishes_its_run(tenant_and_user, live_worker, tmp_path):
    tenant, user = tenant_and_user
    gate, opens_at = _gate_opening_later()
    tasks = [
        node("first"),
        node("gate", "first", handler=gate, retry_policy=ONCE),
        node("after", "gate"),
        node("side", "first"),
    ]
    run, _ = run_dag(tenant, live_worker, tasks)
    assert run.status == "partially_completed"
    wait_until(
        lambda: TaskExecution.objects.filter(tenant=tenant, dead_lettered=True).exists(),
        timeout=30,
        message="the gate's execution to be dead-lettered",
    )
    dead = TaskExecution.objects.get(tenant=tenant, dead_lettered=True)
    assert DagNodeExecution.objects.get(execution_root_id=dead.root_execution_id).node_id == "gate"

    client = Client()
    assert client.login(username=user.username, password="pw-123456")
    dlq = client.get("/dashboard/dlq").content.decode()
    assert f"/dashboard/dags/{run.dag_id}/runs/{run.id}" in dlq  # named by its run
    _wait_for(opens_at)
    response = client.post(f"/dashboard/dlq/{dead.id}/retry", follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Re-running node gate inside" in page
    assert f'href="/dashboard/dags/{run.dag_id}/runs/{run.id}"' in page  # the message links

    wait_until(
        lambda: DagRun.objects.get(id=run.id).status not in ("running", "queued"),
        timeout=60,
        message="the re-run to end",
    )
    states = {s.node_id: s.status for s in DagNodeState.objects.filter(run=run)}
    assert DagRun.objects.get(id=run.id).status == "success", states
    assert states == dict.fromkeys(("first", "gate", "after", "side"), "success")
    assert not TaskExecution.objects.filter(tenant=tenant, dead_lettered=True).exists()
    # Succeeded nodes were not run again: one execution each for first and side.
    assert TaskExecution.objects.filter(tenant=tenant, status="success").count() == 4
    # The gate's failed first attempt is kept beside the one that succeeded, on the run page
    # (its table of attempts, an earlier bar in the Gantt) as in the database.
    [kept] = DagNodeAttempt.objects.filter(run=run, node_id="gate")
    assert (kept.number, kept.status, kept.execution_id) == (1, "failed", dead.root_execution_id)
    gate = DagNodeState.objects.get(run=run, node_id="gate")
    assert (gate.attempt_number, gate.attempt_trigger, gate.attempt_triggered_by) == (
        2,
        "dead_letter_retry",
        f"user:{user.username}",
    )
    run_page = client.get(f"/dashboard/dags/{run.dag_id}/runs/{run.id}").content.decode()
    attempts = run_page.split('id="node-attempts"')[1].split("</table>")[0]
    assert 'data-node-id="gate" data-attempt="1"' in attempts
    assert 'data-node-id="gate" data-attempt="2" data-current="1"' in attempts
    assert "dead letter retried" in attempts
    assert 'class="gantt-bar gantt-earlier tone-failed" data-attempt="1"' in run_page

    # A second click on the stale button changes nothing.
    again = client.post(f"/dashboard/dlq/{dead.id}/retry")
    assert again.status_code == 404
    assert DagRun.objects.get(id=run.id).status == "success"


def test_the_apis_dead_letter_retry_also_re_runs_the_node_inside_its_run(
    tenant_and_user, api, live_worker, tmp_path
):
    tenant, _ = tenant_and_user
    gate, opens_at = _gate_opening_later()
    run, _ = run_dag(
        tenant, live_worker, [node("gate", handler=gate, retry_policy=ONCE), node("after", "gate")]
    )
    assert run.status == "failed"
    wait_until(
        lambda: TaskExecution.objects.filter(tenant=tenant, dead_lettered=True).exists(),
        timeout=30,
        message="the gate's execution to be dead-lettered",
    )
    dead = TaskExecution.objects.get(tenant=tenant, dead_lettered=True)
    _wait_for(opens_at)
    response = api.post(f"/api/v1/admin/dlq/{dead.id}/retry")
    assert response.status_code == 202, response.content
    new_execution = response.json()["execution_id"]
    assert DagNodeExecution.objects.get(execution_root_id=new_execution).run_id == run.id
    wait_until(
        lambda: DagRun.objects.get(id=run.id).status not in ("running", "queued"),
        timeout=60,
        message="the re-run to end",
    )
    assert DagRun.objects.get(id=run.id).status == "success"
    assert api.post(f"/api/v1/admin/dlq/{dead.id}/retry").status_code == 404
    detail = api.get(f"/api/v1/dags/{run.dag_id}/executions/{run.id}").json()
    [gate] = [n for n in detail["nodes"] if n["node_id"] == "gate"]
    assert [(h["attempt"], h["status"], h["trigger"]) for h in gate["history"]] == [
        (1, "failed", "run"),
        (2, "success", "dead_letter_retry"),
    ]
    assert gate["history"][0]["execution_id"] == str(dead.root_execution_id)
    assert gate["history"][0]["execution_status"] == "failed"
    assert gate["history"][1]["execution_id"] == new_execution
