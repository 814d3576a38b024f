"""Internal hosts are allowed per tenant, by the operator (`scheduler_app.services.
tenant_network`), played by an attacker on a real worker: the operator allowed a receiver on
this host's loopback for the platform's own alerts and for tenant demo; acme's http task,
its webhook channel, that channel's test send and its failure notification never reach it,
whatever name acme gives it, while demo's task and the platform's alert do."""

from __future__ import annotations

import uuid

import pytest

from alerting.services.delivery import Target
from alerting.tasks import enqueue_delivery
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.alerting.receiver import Receiver
from tests.api_clients import jwt_client
from tests.integration.conftest import FAST_WORKER, dump_logs
from tests.processes import start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# 127.0.0.1 as one integer: not an address literal the save-time check recognises, so the
# attacker's URL is saved, and resolved (to loopback) only when a request is made.
DISGUISED_LOOPBACK = "2130706433"


def _finished(execution_id) -> TaskExecution:
    wait_until(
        lambda: TaskExecution.platform.get(id=execution_id).status in ("success", "failed"),
        timeout=60,
        message="the run to end",
    )
    return TaskExecution.platform.get(id=execution_id)


def test_a_host_allowed_for_the_platform_or_another_tenant_is_not_reachable_by_acme(
    tenant_factory, settings
):
    receiver = Receiver()
    port = receiver.server.server_address[1]
    queue = f"allow-{uuid.uuid4().hex[:8]}"
    settings.ALERTS = {**settings.ALERTS, "QUEUE": queue, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}
    acme, acme_admin = tenant_factory("acme")
    demo, demo_admin = tenant_factory("demo")
    tenant_webhook_hosts_set(tenant=demo, hosts=["127.0.0.1"], actor="operator:test")
    attacker, victim = jwt_client(acme_admin), jwt_client(demo_admin)
    worker = start_worker(
        name="w-allow",
        queues=queue,
        concurrency=2,
        env_overrides={
            **FAST_WORKER,
            "NOTIFY_QUEUE": queue,
            "NOTIFY_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        },
    )
    try:
        # Named as the operator's and demo's allow-lists name it: refused when saved.
        task = attacker.post(
            "/api/v1/tasks",
            {
                "name": "steal",
                "schedule": {"type": "manual"},
                "handler": {"type": "http", "url": f"{receiver.url}/steal", "method": "POST"},
            },
            format="json",
        )
        assert task.status_code == 400 and task.json()["field"] == "handler.url"
        assert "platform operator allows the host for this tenant" in task.json()["message"]
        channel = attacker.post(
            "/api/v1/channels",
            {"name": "hook", "kind": "webhook", "url": f"{receiver.url}/hook"},
            format="json",
        )
        assert channel.status_code == 400 and channel.json()["field"] == "url"

        # Disguised, it is saved; every request to it is refused when made.
        disguised = f"http://{DISGUISED_LOOPBACK}:{port}"
        channel = attacker.post(
            "/api/v1/channels",
            {"name": "hook", "kind": "webhook", "url": f"{disguised}/hook"},
            format="json",
        )
        assert channel.status_code == 201, channel.content
        tested = attacker.post(f"/api/v1/channels/{channel.json()['id']}/test", {}, format="json")
        assert tested.json()["ok"] is False
        assert tested.json()["detail"].startswith("ssrf_blocked"), tested.json()
        task = attacker.post(
            "/api/v1/tasks",
            {
                "name": "steal",
                "schedule": {"type": "manual"},
                "handler": {"type": "http", "url": f"{disguised}/steal", "method": "POST"},
                "retry_policy": {"max_attempts": 1},
                "notifications": {"on_failure": ["hook"]},
            },
            format="json",
        )
        assert task.status_code == 201, task.content
        run = attacker.post(f"/api/v1/tasks/{task.json()['id']}/trigger", {}, format="json")
        ring([Doorbell(run.json()["execution_id"], str(acme.id), queue)])
        stolen = _finished(run.json()["execution_id"])
        assert (stolen.status, stolen.error_class) == ("failed", "ssrf_blocked")
        assert "resolves to 127.0.0.1, which is a loopback address" in stolen.error_message
        worker.wait_for_log(f"notification to webhook {disguised}/hook failed: ssrf_blocked")

        # Meanwhile the same host answers demo's task and the platform's alert.
        task = victim.post(
            "/api/v1/tasks",
            {
                "name": "report",
                "schedule": {"type": "manual"},
                "handler": {"type": "http", "url": f"{receiver.url}/demo", "method": "POST"},
            },
            format="json",
        )
        assert task.status_code == 201, task.content
        run = victim.post(f"/api/v1/tasks/{task.json()['id']}/trigger", {}, format="json")
        ring([Doorbell(run.json()["execution_id"], str(demo.id), queue)])
        assert _finished(run.json()["execution_id"]).status == "success"
        enqueue_delivery(
            Target("webhook", f"{receiver.url}/ops", platform=True),
            {"event": "alert", "title": "queue depth"},
        )
        wait_until(
            lambda: any(r["path"] == "/ops" for r in receiver.requests),
            timeout=30,
            message="the platform's alert",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    finally:
        worker.stop()
        receiver.server.shutdown()
    assert sorted(r["path"] for r in receiver.requests) == ["/demo", "/ops"]
