"""Observability across processes: a real Celery worker runs the task, counts it in Redis and
delivers its notifications; the test process's /metrics scrape and HTTP receiver see both."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client

from alerting.services.channels import notification_channel_create
from alerting.services.delivery import SIGNATURE_HEADER
from alerting.services.signing import signature_verify
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.workers import worker_list
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.alerting.receiver import Receiver
from tests.factories import make_task
from tests.integration.conftest import FAST_WORKER
from tests.processes import start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _runs_total(text: str, status: str) -> float:
    prefix = "scheduler_runs_total{"
    total = 0.0
    for line in text.splitlines():
        if line.startswith(prefix) and f'status="{status}"' in line and 'tenant="acme"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.usefixtures("private_broker")
def test_worker_counts_and_notifies_across_processes(tenant, settings):
    # private_broker: the suite's shared worker (whose settings block the receiver's
    # loopback address) must not take this run or its notifications.
    settings.MONITORING = {
        **settings.MONITORING,
        "METRICS_BEARER_TOKEN": "t0ken",
    }
    receiver = Receiver()
    # The receiver is on loopback: the operator allows it for this tenant (its own list).
    tenant_webhook_hosts_set(tenant=tenant, hosts=["127.0.0.1"], actor="operator:test")
    notification_channel_create(
        tenant=tenant,
        name="hook",
        kind="webhook",
        target=receiver.url + "/hook",
        signing_secret="s3cret",
    )
    task = make_task(
        tenant,
        name="doomed",
        handler={"type": "python", "callable": "fail_permanently"},
        max_attempts=1,
        notifications={"on_failure": ["hook"], "on_dlq": ["hook"]},
    )
    # A queue only this worker consumes, for the run and for its notifications, so the
    # suite's shared worker (other settings) cannot take either.
    queue = f"obs-{uuid.uuid4().hex[:8]}"
    worker = start_worker(
        name="w-obs",
        queues=queue,
        concurrency=1,
        env_overrides={
            **FAST_WORKER,
            "NOTIFY_QUEUE": queue,
        },
    )
    scrape = lambda: Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").content.decode()  # noqa: E731
    try:
        before = _runs_total(scrape(), "failed")
        execution = task_trigger(task=task)
        ring([Doorbell(str(execution.id), str(tenant.id), queue)])
        wait_until(lambda: len(receiver.requests) >= 2, timeout=30, message="two notifications")
    except AssertionError:
        print(worker.log()[-3000:])
        raise
    finally:
        names = [w.name for w in worker_list() if w.state == "active"]
        worker.stop()
        receiver.server.shutdown()
    assert TaskExecution.platform.get(id=execution.id).dead_lettered
    assert _runs_total(scrape(), "failed") - before == 1  # counted by the worker process
    assert any(name.startswith("w-obs") for name in names), names
    events = sorted(json.loads(r["body"])["event"] for r in receiver.requests)
    assert events == ["dead_letter", "failure"]
    for request in receiver.requests:
        assert signature_verify("s3cret", request["body"], request["headers"][SIGNATURE_HEADER])
