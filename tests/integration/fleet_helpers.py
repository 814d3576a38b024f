"""Helpers shared by the worker-fleet integration tests."""

from __future__ import annotations

import functools
import os
import signal

from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.fleet.registry import worker_records
from scheduler_app.models import TaskExecution
from tests.processes import ServiceProcess, start_worker, wait_until

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


def fleet_worker(
    name: str, *, concurrency: int = 2, queues: str = "critical,normal,bulk", **env: str
) -> ServiceProcess:
    (worker,) = fleet_workers([name], concurrency=concurrency, queues=queues, **env)
    return worker


def fleet_workers(
    names: list[str], *, concurrency: int = 2, queues: str = "critical,normal,bulk", **env: str
) -> list[ServiceProcess]:
    """Workers started side by side, back once each is ready and registered in the fleet."""
    workers = [
        start_worker(
            name=name,
            queues=queues,
            concurrency=concurrency,
            env_overrides={**FLEET_WORKER, **env},
            wait=False,
        )
        for name in names
    ]
    for worker in workers:
        worker.wait_for_log("ready.", timeout=60)
        wait_until(
            functools.partial(registered, worker),
            timeout=30,
            message=f"{worker.name} to register",
        )
    return workers


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
    for execution in TaskExecution.platform.filter(task=task).order_by("attempt"):
        last[execution.root_execution_id or execution.id] = execution
    return last
