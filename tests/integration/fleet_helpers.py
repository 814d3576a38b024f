"""Helpers shared by the worker-fleet integration tests."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import TaskExecution
from tests.processes import ServiceProcess, start_worker, wait_until
from workers.registry import worker_records

FLEET_WORKER = {
    "WORKER_KILL_GRACE_SECONDS": "1",
    "WORKER_LEASE_SECONDS": "10",
    "WORKER_HEARTBEAT_SECONDS": "0.5",
    "WORKER_CANCEL_POLL_SECONDS": "0.2",
}
FLEET_BEAT = {
    "SCHEDULER_LOCK_TTL": "3",
    "SCHEDULER_TICK_SECONDS": "0.2",
    "SCHEDULER_HOUSEKEEPING_SECONDS": "0.5",
    "SCHEDULER_REQUEUE_GRACE": "15",
    "WORKER_HEARTBEAT_SECONDS": "0.5",
}


def fleet_worker(name: str, *, concurrency: int = 2, **env: str) -> ServiceProcess:
    worker = start_worker(name=name, concurrency=concurrency, env_overrides={**FLEET_WORKER, **env})
    wait_until(lambda: registered(worker), timeout=30, message=f"{name} to register")
    return worker


def registered(worker: ServiceProcess):
    for record in worker_records():
        if record.pid == worker.pid and record.state == "active":
            return record
    return None


def hostname_of(worker: ServiceProcess) -> str:
    record = registered(worker)
    assert record is not None
    return record.hostname


def terminate_main(worker: ServiceProcess) -> None:
    """SIGTERM to the main process only, as systemd or Kubernetes deliver it."""
    os.kill(worker.pid, signal.SIGTERM)


def all_terminal(queryset) -> bool:
    return not queryset.exclude(status__in=TERMINAL_STATUSES).exists()


def finals(task) -> dict:
    """Per fire (root execution): its last attempt."""
    last: dict = {}
    for execution in TaskExecution.objects.filter(task=task).order_by("attempt"):
        last[execution.root_execution_id or execution.id] = execution
    return last


@pytest.fixture
def private_broker():
    """Broker queues of this test's own, under a unique key prefix. The session's shared
    `live_worker` (and any stray consumer of the same Redis db) reads the unprefixed tier
    queues; these tests start, kill and count their own workers, so nobody else may take
    their runs. Processes started meanwhile inherit BROKER_KEY_PREFIX; this process
    publishes through a Celery connection with the same prefix."""
    from project.celery import app

    prefix = f"fleet-{uuid.uuid4().hex[:10]}:"
    previous_env = os.environ.get("BROKER_KEY_PREFIX")
    previous_options = dict(app.conf.broker_transport_options or {})

    def use(options: dict) -> None:
        # Drop (not close) the cached pools: kombu's global producer pools still hold them.
        app._pool = None
        app.amqp._producer_pool = None
        app.conf.broker_transport_options = options

    os.environ["BROKER_KEY_PREFIX"] = prefix
    use({**previous_options, "global_keyprefix": prefix})
    try:
        yield prefix
    finally:
        use(previous_options)
        if previous_env is None:
            os.environ.pop("BROKER_KEY_PREFIX", None)
        else:
            os.environ["BROKER_KEY_PREFIX"] = previous_env
