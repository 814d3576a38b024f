"""Runs rung again, and backfills' runs, in their own run's trace (real PostgreSQL and Redis,
this process playing the beat, the reaper and the worker): every ring again is a
`scheduler.ring` span under the run's fire, saying why (`scheduler.ring.reason`), while the
first ring is the fire span's own end; and a backfill's run (rung by the leader's promote, a
ring span of its own) is a trace from its fire span to the worker's finish."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from dags.services.backfills import backfill_create
from runs.dead_workers import dead_workers_reap
from runs.lost import expired_leases_reap
from scheduler_app.fleet.registry import worker_record_save
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.claims import executions_claim
from scheduler_app.services.firing import (
    Fire,
    due_pending_promote,
    fires_record,
    stale_queued_requeue,
    takeover_queued_republish,
)
from scheduler_app.services.fleet import worker_executions_release
from tests.factories import make_task, make_worker_record
from tests.tracing.conftest import by_name, events_of, parent_id, steps_of
from workers.runner import execution_run

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "ring-again@host"


def _fired_and_rung(task) -> TaskExecution:
    """One scheduled run, fired and rung once (to a queue of the test's own): its row."""
    fire = Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=timezone.now() - timedelta(milliseconds=100),
        priority=5,
        queue=f"ring-again-{uuid.uuid4().hex[:8]}",
        max_attempts=1,
    )
    (bell,) = fires_record([fire], now=timezone.now())
    assert ring([bell]) == 1
    return TaskExecution.platform.get(id=bell.execution_id)


def _rings_of(spans, row: TaskExecution) -> list:
    """The run's rings, oldest first: its first, in its fire span (its end the publish's
    end), then each ring again, a span of its own under the fire."""
    found = by_name(spans)
    (fire,) = [
        s for s in found["scheduler.fire"] if s.attributes["scheduler.execution.id"] == str(row.id)
    ]
    # Its first ring ended it: no event of the ring's own unless a step beside it took time.
    steps_of(fire, ["scheduler.recorded", "scheduler.ring.started"])
    rings = [
        s for s in found.get("scheduler.ring", []) if s.context.trace_id == fire.context.trace_id
    ]
    for span in rings:
        assert parent_id(span) == fire.context.span_id
        assert span.start_time >= fire.end_time  # rung again after the first ring
    return [fire, *sorted(rings, key=lambda span: span.start_time)]


def test_a_run_requeued_by_the_leaders_sweep_is_rung_again_in_its_trace(tenant, spans):
    row = _fired_and_rung(make_task(tenant, name="lost-bell", schedule={"type": "manual"}))
    # Its doorbell was lost (Redis restarted): nobody started it within the grace.
    TaskExecution.platform.filter(id=row.id).update(queued_at=timezone.now() - timedelta(minutes=5))
    bells = stale_queued_requeue(now=timezone.now(), grace_seconds=60, limit=100)
    assert [bell.execution_id for bell in bells] == [str(row.id)]
    ring(bells, reason=RingReason.REQUEUE)  # what the leader's housekeeping does

    first, again = _rings_of(spans, row)
    assert first.name == "scheduler.fire"
    assert "scheduler.ring.reason" not in first.attributes
    assert again.attributes["scheduler.ring.reason"] == "requeue"


def test_a_run_republished_after_a_takeover_is_rung_again_in_its_trace(tenant, spans):
    row = _fired_and_rung(make_task(tenant, name="takeover", schedule={"type": "manual"}))
    now = timezone.now() + timedelta(seconds=1)
    bells = takeover_queued_republish(since=now - timedelta(seconds=30), now=now, limit=100)
    assert [bell.execution_id for bell in bells] == [str(row.id)]
    ring(bells, reason=RingReason.REPUBLISH)  # the new leader's `_republish_queued`

    _, again = _rings_of(spans, row)
    assert again.attributes["scheduler.ring.reason"] == "republish"


def test_a_dead_workers_kept_run_is_rung_by_the_reaper_in_its_trace(tenant, spans):
    row = _fired_and_rung(make_task(tenant, name="kept", schedule={"type": "manual"}))
    dead = f"dead-{uuid.uuid4().hex[:6]}"
    worker_record_save(make_worker_record(dead, silent_for=2.5))
    # A worker kept the queued run for itself (a DAG node's hand-on) and died before its claim.
    TaskExecution.platform.filter(id=row.id).update(worker_id=dead)

    dead_workers_reap()
    connection.close()

    row.refresh_from_db()
    assert row.status == "queued" and row.worker_id == ""
    _, again = _rings_of(spans, row)
    assert again.attributes["scheduler.ring.reason"] == "dead_worker"


def test_a_run_a_draining_worker_releases_keeps_its_trace_for_the_next_worker(tenant, spans):
    row = _fired_and_rung(make_task(tenant, name="released", schedule={"type": "manual"}))
    (claim,) = executions_claim(execution_ids=[row.id], worker_id=WORKER, lease_seconds=60)
    released = worker_executions_release(worker_id=WORKER)
    assert [bell.traceparent for bell, _ in released] == [row.traceparent]
    ring([bell for bell, _ in released], reason=RingReason.RELEASED)  # the drain's `release`

    _, again = _rings_of(spans, row)
    assert again.attributes["scheduler.ring.reason"] == "released"
    assert claim.claim_token is not None


def test_a_run_the_lease_reaper_requeues_is_rung_again_in_its_trace(tenant, spans):
    row = _fired_and_rung(make_task(tenant, name="requeued", schedule={"type": "manual"}))
    executions_claim(execution_ids=[row.id], worker_id=WORKER, lease_seconds=60)
    TaskExecution.platform.filter(id=row.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert expired_leases_reap() == 1  # the same attempt back in the queue, rung on commit

    row.refresh_from_db()
    assert row.status == "queued" and row.attempt == 1
    _, again = _rings_of(spans, row)
    assert again.attributes["scheduler.ring.reason"] == "worker_lost"


def test_a_run_the_lease_reaper_fails_is_retried_and_rung_in_the_same_trace(
    tenant, spans, settings
):
    # No requeue left: the loss fails the attempt and its retry is due.
    settings.FLEET = {**settings.FLEET, "LOST_REQUEUES": 0}
    task = make_task(tenant, name="lost-lease", schedule={"type": "manual"}, max_attempts=2)
    fire = Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=timezone.now() - timedelta(milliseconds=100),
        priority=5,
        queue=f"ring-again-{uuid.uuid4().hex[:8]}",
        max_attempts=2,
    )
    (bell,) = fires_record([fire], now=timezone.now())
    ring([bell])
    executions_claim(execution_ids=[bell.execution_id], worker_id=WORKER, lease_seconds=60)
    # Its worker stopped renewing the lease: the reaper fails the attempt, a retry is due.
    TaskExecution.platform.filter(id=bell.execution_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert expired_leases_reap() == 1
    (retry,) = TaskExecution.platform.filter(task=task, attempt=2)
    TaskExecution.platform.filter(id=retry.id).update(scheduled_at=timezone.now())
    bells = due_pending_promote(now=timezone.now() + timedelta(seconds=1), limit=100)
    assert [b.execution_id for b in bells] == [str(retry.id)]
    ring(bells)

    first = TaskExecution.platform.get(id=bell.execution_id)
    assert retry.traceparent == first.traceparent  # one trace shows every attempt
    rings = _rings_of(spans, first)
    assert len(rings) == 2  # the fire's ring (its span's end) and the retry's, under the fire


def test_a_backfills_run_is_one_trace_from_its_fire_to_its_finish(tenant, spans):
    task = make_task(
        tenant,
        name="backfilled",
        schedule={"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    )
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    backfill = backfill_create(tenant=tenant, task=task, start=end - timedelta(hours=3), end=end)
    # max_parallel 1: its first run is released at once, the others as each one finishes.
    (row,) = TaskExecution.platform.filter(task=task, trigger="backfill")
    assert row.traceparent  # its trace starts with the backfill's release

    # The leader promotes it as any due pending row, and a worker runs it.
    bells = due_pending_promote(now=timezone.now(), limit=100)
    assert [bell.execution_id for bell in bells] == [str(row.id)]
    assert bells[0].traceparent == row.traceparent
    assert ring(bells) == 1
    assert execution_run(execution_id=str(row.id), worker_id=WORKER) == "success"

    found = by_name(spans)
    (fire,) = [
        s for s in found["scheduler.fire"] if s.attributes["scheduler.execution.id"] == str(row.id)
    ]
    assert fire.parent is None  # a trace of its own, not the request's that made the backfill
    assert fire.attributes["scheduler.trigger"] == "backfill"
    assert fire.attributes["scheduler.backfill.id"] == str(backfill.id)
    assert fire.attributes["scheduler.schedule.due_at"] == row.scheduled_at.isoformat()
    trace_id = fire.context.trace_id
    # Recorded pending, its fire span ended at the INSERT; the promote's ring, a span of its
    # own (another process's, in production); then the worker's run span.
    assert list(events_of(fire)) == []
    (rung,) = [s for s in found["scheduler.ring"] if s.context.trace_id == trace_id]
    (ran,) = [s for s in found["worker.run"] if s.context.trace_id == trace_id]
    assert "scheduler.ring.reason" not in rung.attributes
    assert parent_id(rung) == parent_id(ran) == fire.context.span_id
    assert fire.end_time <= rung.start_time <= rung.end_time <= ran.start_time
    steps_of(
        ran,
        [
            "scheduler.claimed",
            "scheduler.handler.started",
            "scheduler.handler.ended",
            "scheduler.finish.started",
        ],
    )


def test_a_backfill_recorded_while_tracing_is_off_gets_no_context(tenant):
    task = make_task(
        tenant,
        name="untraced-fill",
        schedule={"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    )
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    backfill_create(tenant=tenant, task=task, start=end - timedelta(hours=3), end=end)
    (row,) = TaskExecution.platform.filter(task=task, trigger="backfill")
    assert row.traceparent == ""
