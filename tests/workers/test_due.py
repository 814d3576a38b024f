"""Runs rung ahead of their time: claimed early, started at their scheduled time, against the
real PostgreSQL and Redis (the test plays the worker that received the doorbell)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.counters import LAG_BUCKETS, LAG_KEY, read_histograms
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.claims import CLAIM_CLOCK_TOLERANCE
from tests.factories import make_queued_runs, make_task
from workers.due import seconds_until_due, wait_until_due
from workers.runner import execution_batch_run, execution_run

WORKER = "due-test@host"
# How far ahead of their time the runs are claimed: inside the claim's tolerance (2 s), and
# long enough that a loaded machine still claims them before it.
LEAD = timedelta(seconds=1.5)


def test_seconds_until_due_is_never_negative_nor_past_the_claim_tolerance():
    now = timezone.now()
    assert seconds_until_due(now - timedelta(seconds=5), now=now) == 0
    assert seconds_until_due(now + timedelta(milliseconds=300), now=now) == pytest.approx(0.3)
    limit = CLAIM_CLOCK_TOLERANCE.total_seconds()
    assert seconds_until_due(now + timedelta(hours=1), now=now) == limit


def test_a_cancel_ends_the_wait():
    cancel = threading.Event()
    waiter = threading.Thread(
        target=wait_until_due,
        args=(timezone.now() + timedelta(seconds=1.9),),
        kwargs={"cancel_event": cancel},
    )
    waiter.start()
    cancel.set()
    waiter.join(timeout=1.0)
    assert not waiter.is_alive()


def _queued_ahead(task, count: int, *, ahead: timedelta) -> list[TaskExecution]:
    """Queued runs due `ahead` from now, as a beat that rings ahead leaves them, on a queue of
    this test's own and with no doorbell (no other worker can take them)."""
    queue = f"due-test-{uuid.uuid4().hex[:8]}"
    due = timezone.now() + ahead
    return make_queued_runs(task, count, queue=queue, due=due, trigger="schedule")


@pytest.mark.django_db(transaction=True)
def test_a_run_claimed_ahead_starts_its_handler_at_its_time(tenant):
    task = make_task(tenant, name="ahead", schedule={"type": "manual"})
    (run,) = _queued_ahead(task, 1, ahead=LEAD)
    assert execution_run(execution_id=str(run.id), worker_id=WORKER) == "success"
    row = TaskExecution.platform.get(id=run.id)
    assert row.scheduled_at <= row.started_at <= row.completed_at
    _assert_lag_observed_once_each(row.queue, [row])


@pytest.mark.django_db(transaction=True)
def test_a_batch_claimed_ahead_waits_for_its_time_without_spilling(tenant):
    task = make_task(tenant, name="ahead-batch", schedule={"type": "manual"})
    runs = _queued_ahead(task, 4, ahead=LEAD)
    summary = execution_batch_run(execution_ids=[str(run.id) for run in runs], worker_id=WORKER)
    # The wait is not a slow handler: nothing is handed back (a spill would re-ring them).
    assert summary == "batch of 4: 4 success"
    rows = list(TaskExecution.platform.filter(id__in=[run.id for run in runs]))
    for row in rows:
        assert row.worker_id == WORKER
        assert row.scheduled_at <= row.started_at <= row.completed_at
    _assert_lag_observed_once_each(runs[0].queue, rows)


def _assert_lag_observed_once_each(queue: str, rows: list[TaskExecution]) -> None:
    """The schedule-to-start histogram (this test's own queue) counted each run once, at its
    real start: not at the claim, which came before its time."""
    lag = read_histograms("lag")[queue]
    assert lag.count == len(rows)
    real = sum((row.started_at - row.scheduled_at).total_seconds() for row in rows)
    assert lag.total == pytest.approx(real, abs=0.001)
    get_redis().hdel(
        redis_key(LAG_KEY),
        *(f"{queue}|{bound}" for bound in [*map(str, LAG_BUCKETS), "+Inf"]),
        f"{queue}|sum",
        f"{queue}|count",
    )


@pytest.mark.django_db(transaction=True)
def test_a_run_due_later_than_the_tolerance_is_not_claimed(tenant):
    task = make_task(tenant, name="too-early", schedule={"type": "manual"})
    (run,) = _queued_ahead(task, 1, ahead=CLAIM_CLOCK_TOLERANCE + timedelta(seconds=30))
    assert execution_run(execution_id=str(run.id), worker_id=WORKER) == "duplicate"
    assert TaskExecution.platform.get(id=run.id).status == "queued"
