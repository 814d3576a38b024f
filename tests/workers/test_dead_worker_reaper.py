"""The dead-worker reaper against real PostgreSQL and Redis: idempotent however many run."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.dead_workers import dead_workers_reap
from scheduler_app.fleet.registry import worker_record_get, worker_record_save
from scheduler_app.models import ExecutionLoss, TaskExecution
from tests.factories import make_task, make_worker_record

pytestmark = pytest.mark.django_db(transaction=True)


def _running(task, worker_id: str) -> TaskExecution:
    now = timezone.now()
    return TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status="running",
        scheduled_at=now - timedelta(seconds=5),
        started_at=now - timedelta(seconds=4),
        worker_id=worker_id,
        claim_token=uuid.uuid4(),
        lease_expires_at=now + timedelta(minutes=5),  # the lease alone would wait
        max_attempts=3,
    )


@pytest.mark.usefixtures("private_broker")
def test_two_missed_heartbeats_mark_a_worker_dead_and_requeue_its_runs_once(tenant):
    """The runs a dead worker held go back to the queue as the same attempt, each rung once
    and with one loss in its history however many reapers race (no retry spent)."""
    from project.celery import app
    from scheduler_app.ringing.publish import _broker_client

    task = make_task(tenant, name="t", schedule={"type": "manual"})
    dead = f"dead-{uuid.uuid4().hex[:6]}"
    alive = f"alive-{uuid.uuid4().hex[:6]}"
    worker_record_save(make_worker_record(dead, silent_for=2.5))
    worker_record_save(make_worker_record(alive, silent_for=0.5))
    lost = [_running(task, dead) for _ in range(5)]
    kept = _running(task, alive)

    def reap() -> None:
        try:
            dead_workers_reap()
        finally:
            connection.close()

    threads = [threading.Thread(target=reap) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    dead_workers_reap()

    assert worker_record_get(dead).state == "dead"
    assert worker_record_get(alive).state == "active"
    client, prefix = _broker_client()
    assert prefix == app.conf.broker_transport_options["global_keyprefix"]  # this test's own
    messages = client.lrange(prefix + "normal", 0, -1)
    for execution in lost:
        execution.refresh_from_db()
        assert (execution.status, execution.attempt, execution.claim_token) == ("queued", 1, None)
        assert not TaskExecution.platform.filter(retry_of_id=execution.id).exists()
        losses = ExecutionLoss.platform.filter(execution_id=execution.id)
        assert [(loss.outcome, loss.worker_id) for loss in losses] == [("requeued", dead)]
        assert len([m for m in messages if _names(m, execution.id)]) == 1
    kept.refresh_from_db()
    assert kept.status == "running"


@pytest.mark.usefixtures("private_broker")
def test_a_dead_workers_kept_dag_node_is_rung_for_the_fleet_once(tenant):
    """A worker keeps a ready DAG node for itself (its row queued with the worker's id, no
    doorbell) and dies before claiming it: the reaper rings it, once however many reap."""
    from project.celery import app
    from scheduler_app.ringing.publish import _broker_client

    task = make_task(tenant, name="kept", schedule={"type": "manual"})
    dead = f"dead-{uuid.uuid4().hex[:6]}"
    worker_record_save(make_worker_record(dead, silent_for=2.5))
    now = timezone.now()
    kept = TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status="queued",
        queue="normal",
        scheduled_at=now,
        queued_at=now,
        worker_id=dead,
        max_attempts=1,
    )
    untouched = TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status="queued",
        queue="normal",
        scheduled_at=now - timedelta(seconds=1),
    )
    threads = [threading.Thread(target=dead_workers_reap) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    connection.close()  # the threads' writes are committed; read them fresh

    kept.refresh_from_db()
    assert kept.status == "queued" and kept.worker_id == ""
    client, prefix = _broker_client()
    assert prefix == app.conf.broker_transport_options["global_keyprefix"]  # this test's own
    messages = client.lrange(prefix + "normal", 0, -1)
    named = [m for m in messages if _names(m, kept.id)]
    assert len(named) == 1  # one doorbell, whichever reaper won
    assert not any(_names(m, untouched.id) for m in messages)


def _names(message: bytes, execution_id) -> bool:
    import base64
    import json

    body = json.loads(base64.b64decode(json.loads(message)["body"]))
    return body[0] == [str(execution_id)]
