"""A truthful Flower: with a real worker sending events and a real Flower reading them, a run
that always fails shows FAILURE under its own execution id (the Celery task id of a single
run's doorbell), a successful one SUCCESS, and Flower's home counts the failures.

The bug it pins: a task that always failed, 8 times, showed as SUCCESS in Flower, whose home
page said "Failed 0", under task ids nobody could match to a run."""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import FAST_WORKER
from tests.processes import (
    _start,
    broker_key_prefix,
    quiesce,
    service_env,
    start_worker,
    wait_until,
)
from tests.redis_servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)
LOGIN = ("flower", "flower-test-password")


@pytest.fixture
def worker_and_flower(transactional_db):
    prefix = f"flower-{uuid.uuid4().hex[:8]}:"
    env = {**FAST_WORKER, "BROKER_KEY_PREFIX": prefix, "CELERY_SEND_EVENTS": "true"}
    with broker_key_prefix(prefix):
        port = free_port()
        argv = [sys.executable, "-m", "celery", "-A", "project", "flower", f"--port={port}"]
        argv += ["--address=127.0.0.1", f"--basic_auth={':'.join(LOGIN)}"]
        flower = _start("flower-truth", argv, service_env(**env))
        url = f"http://127.0.0.1:{port}"
        worker = start_worker(name="w-flower", concurrency=2, env_overrides=env)
        try:
            wait_until(lambda: _get(f"{url}/healthcheck") is not None, timeout=60, message="flower")
            yield url
        finally:
            quiesce(prefix)
            worker.stop()
            flower.stop()


def _get(url: str):
    try:
        response = requests.get(url, auth=LOGIN, timeout=5)
    except requests.RequestException:
        return None
    return response if response.status_code == 200 else None


def _flower_task(url: str, task_id: str) -> dict | None:
    response = _get(f"{url}/api/task/info/{task_id}")
    return response.json() if response is not None else None


def _ended(url: str, task_id: str) -> dict | None:
    info = _flower_task(url, task_id)
    return info if info and info.get("state") in ("SUCCESS", "FAILURE") else None


def test_a_failed_run_is_failure_in_flower_under_its_execution_id(
    tenant, worker_and_flower, settings
):
    url = worker_and_flower
    settings.FAIR_INFLIGHT_PER_TENANT = 0  # the batch below is rung whole
    failing = make_task(
        tenant,
        name="always-fails",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "fail"},
        retry_policy={"max_attempts": 1},
    )
    fine = make_task(
        tenant,
        name="always-fine",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "noop"},
    )
    failed = [task_trigger(task=failing) for _ in range(3)]
    succeeded = task_trigger(task=fine)
    wait_until(
        lambda: (
            TaskExecution.platform.filter(
                id__in=[e.id for e in [*failed, succeeded]], status__in=["failed", "success"]
            ).count()
            == 4
        ),
        timeout=60,
        message="the four runs to end",
    )
    assert set(
        TaskExecution.platform.filter(id__in=[e.id for e in failed]).values_list(
            "status", flat=True
        )
    ) == {"failed"}

    for execution in failed:
        info = wait_until(
            lambda e=execution: _ended(url, str(e.id)), timeout=30, message="Flower's row"
        )
        assert info["state"] == "FAILURE", info
        assert info["name"] == "always-fails"  # the shadow name: the task, in words
        assert str(execution.id) in info["args"]  # and the id is the task's own
        assert f"execution {execution.id}: failed" in info["exception"]
    ok = wait_until(lambda: _ended(url, str(succeeded.id)), timeout=30, message="Flower's row")
    assert ok["state"] == "SUCCESS", ok

    # Flower's task list (what its home page counts) has the failures as failures.
    listed = _get(f"{url}/api/tasks?state=FAILURE").json()
    assert {str(e.id) for e in failed} <= set(listed)
    # The failed attempts were final: no retry row, nothing left queued by the raise.
    assert not TaskExecution.platform.filter(task=failing, attempt__gt=1).exists()

    # Three runs rung in one batch message: one Flower row for them, FAILURE, its arguments
    # holding every execution id and its exception the counts.
    now = timezone.now()
    batched = [
        TaskExecution.objects.create(
            tenant=tenant,
            task=failing,
            status="queued",
            trigger="manual",
            scheduled_at=now - timedelta(seconds=i),
            queued_at=now,
            max_attempts=1,
        )
        for i in range(3)
    ]
    bells = [Doorbell(str(e.id), str(tenant.id), e.queue, task_name=failing.name) for e in batched]
    assert ring(bells, sticky=False, batch=3, processes=1) == 3

    def batch_row() -> dict | None:
        response = _get(f"{url}/api/tasks")
        rows = response.json().values() if response is not None else []
        return next(
            (
                row
                for row in rows
                if str(batched[0].id) in (row.get("args") or "")
                and row.get("state") in ("SUCCESS", "FAILURE")
            ),
            None,
        )

    row = wait_until(batch_row, timeout=60, message="the batch's row in Flower")
    assert row["state"] == "FAILURE", row
    assert all(str(e.id) in row["args"] for e in batched)
    assert "batch of 3: 3 failed" in row["exception"]
    assert row["name"] == "always-fails (batch of 3)"
