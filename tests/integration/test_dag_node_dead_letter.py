"""A DAG node that ran out of attempts lands in the dead-letter queue; retrying it from the
dashboard re-runs it inside its run (real PostgreSQL, Redis and Celery worker), so the run
finishes instead of staying partially completed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client

from dags.models import DagNodeAttempt, DagNodeExecution, DagNodeState, DagRun
from scheduler_app.models import TaskExecution
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.integration.test_dag_runs import ONCE, node, run_dag
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("bubblewrap")]


class Gate:
    """A webhook on this host that fails (503) until the test opens it: the gate node's
    handler. (A shell task sees nothing of the host, its sandbox, so it cannot wait for a flag
    the test sets; the shared worker may call 127.0.0.1, WEBHOOK_ALLOWED_HOSTS.)"""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.calls = 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gate.calls += 1
                self.send_response(200 if gate.opened.is_set() else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.handler = {
            "type": "http",
            "url": f"http://127.0.0.1:{self.server.server_address[1]}/gate",
            "timeout_seconds": 10,
        }

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def gate(tenant) -> Iterator[Gate]:
    # The webhook's host is internal: the operator allows it for this tenant (the definition
    # is validated here and the worker calls it).
    tenant_webhook_hosts_set(tenant=tenant, hosts=["127.0.0.1"], actor="operator")
    gate = Gate()
    yield gate
    gate.server.shutdown()
    gate.server.server_close()


def test_retrying_a_dead_lettered_node_finishes_its_run(tenant_and_user, live_worker, gate):
    tenant, user = tenant_and_user
    tasks = [
        node("first"),
        node("gate", "first", handler=gate.handler, retry_policy=ONCE),
        node("after", "gate"),
        node("side", "first"),
    ]
    run, _ = run_dag(tenant, live_worker, tasks)
    assert run.status == "partially_completed"
    wait_until(
        lambda: TaskExecution.platform.filter(tenant=tenant, dead_lettered=True).exists(),
        timeout=30,
        message="the gate's execution to be dead-lettered",
    )
    dead = TaskExecution.platform.get(tenant=tenant, dead_lettered=True)
    assert DagNodeExecution.objects.get(execution_root_id=dead.root_execution_id).node_id == "gate"

    client = Client()
    assert client.login(username=user.username, password="pw-123456")
    dlq = client.get("/dashboard/dlq").content.decode()
    assert f"/dashboard/dags/{run.dag_id}/runs/{run.id}" in dlq  # named by its run
    assert gate.calls == 1  # it did fail, closed
    gate.open()
    response = client.post(f"/dashboard/dlq/{dead.id}/retry", follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Re-running node gate inside" in page
    assert f'href="/dashboard/dags/{run.dag_id}/runs/{run.id}"' in page  # the message links

    wait_until(
        lambda: DagRun.platform.get(id=run.id).status not in ("running", "queued"),
        timeout=60,
        message="the re-run to end",
    )
    states = {s.node_id: s.status for s in DagNodeState.objects.filter(run=run)}
    assert DagRun.platform.get(id=run.id).status == "success", states
    assert states == dict.fromkeys(("first", "gate", "after", "side"), "success")
    assert not TaskExecution.platform.filter(tenant=tenant, dead_lettered=True).exists()
    # Succeeded nodes were not run again: one execution each for first and side.
    assert TaskExecution.platform.filter(tenant=tenant, status="success").count() == 4
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
    assert DagRun.platform.get(id=run.id).status == "success"


def test_the_apis_dead_letter_retry_also_re_runs_the_node_inside_its_run(
    tenant_and_user, api, live_worker, gate
):
    tenant, _ = tenant_and_user
    run, _ = run_dag(
        tenant,
        live_worker,
        [node("gate", handler=gate.handler, retry_policy=ONCE), node("after", "gate")],
    )
    assert run.status == "failed"
    wait_until(
        lambda: TaskExecution.platform.filter(tenant=tenant, dead_lettered=True).exists(),
        timeout=30,
        message="the gate's execution to be dead-lettered",
    )
    dead = TaskExecution.platform.get(tenant=tenant, dead_lettered=True)
    assert gate.calls == 1
    gate.open()
    response = api.post(f"/api/v1/admin/dlq/{dead.id}/retry")
    assert response.status_code == 202, response.content
    new_execution = response.json()["execution_id"]
    assert DagNodeExecution.objects.get(execution_root_id=new_execution).run_id == run.id
    wait_until(
        lambda: DagRun.platform.get(id=run.id).status not in ("running", "queued"),
        timeout=60,
        message="the re-run to end",
    )
    assert DagRun.platform.get(id=run.id).status == "success"
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
