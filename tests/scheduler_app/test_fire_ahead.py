"""The leader rings fires ahead of their time (tasks that allow overlap) against the real
PostgreSQL and Redis; how a burst is cut for the fleet."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.conf import settings

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from beat.publisher import FirePublisher
from scheduler_app.fleet.registry import STATE_DRAINING, live_processes, worker_record_save
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.publish import BURST_MESSAGES, batch_size
from scheduler_app.services.claims import CLAIM_CLOCK_TOLERANCE
from tests.clock import ManualClock
from tests.factories import make_task, make_worker_record

AHEAD = 1.9  # seconds


def _config(ahead: float, most: float = 0.0) -> EngineConfig:
    return EngineConfig(
        tick_seconds=0.2,
        batch_size=500,
        catchup_window_seconds=300,
        requeue_grace_seconds=60,
        housekeeping_seconds=60,
        lock_ttl_seconds=3,
        fire_ahead_seconds=ahead,
        fire_ahead_max_seconds=most,
    )


def test_the_lead_must_stay_inside_the_claims_clock_tolerance():
    limit = CLAIM_CLOCK_TOLERANCE.total_seconds()
    with pytest.raises(ValueError, match="fire_ahead_seconds"):
        _config(limit)
    with pytest.raises(ValueError, match="fire_ahead_seconds"):
        _config(-0.1)
    with pytest.raises(ValueError, match="fire_ahead_max_seconds"):
        _config(0.5, most=limit)


@pytest.mark.django_db(transaction=True)
def test_a_burst_too_big_for_the_base_lead_rings_early_enough_and_once(tenant, redis_client):
    """200 fires due in 4 s on the engine's clock, and a leader that has measured itself at
    50 fires/s: rung at the base lead (0.5 s) they would go out up to 3.5 s late, so they
    ring at once; a fire that must be judged at its time (overlap `skip`) still waits for it.
    The clock stands still: however long the 200 tasks take to create, they are due in 4 s
    when the engine looks (it once read the wall clock, and a slow machine found them due)."""
    clock = ManualClock()
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    lock = LeaderLock(redis_client, key_prefix=prefix, node_id="burst", ttl_seconds=3)
    engine = SchedulerEngine(lock=lock, config=_config(0.5, most=5.5), clock=clock)
    run_at = (clock() + timedelta(seconds=4)).isoformat()
    burst = [
        make_task(tenant, name=f"burst-{n}", schedule={"type": "once", "run_at": run_at})
        for n in range(200)
    ]
    judged = make_task(
        tenant,
        name="judged",
        schedule={"type": "once", "run_at": run_at},
        policy={"overlap": "skip"},
    )
    try:
        engine.load()
        engine.ring_rate.per_second = 50.0
        engine.tick()
        assert engine.last_extra_lead > timedelta(0)
        early = TaskExecution.platform.filter(task__in=burst)
        assert early.count() == 200
        assert all(run.created_at < run.scheduled_at - timedelta(seconds=1) for run in early)
        assert not TaskExecution.platform.filter(task=judged).exists()
        engine.tick()  # nothing is fired twice
        assert TaskExecution.platform.filter(task__in=burst).count() == 200
    finally:
        engine.lock.release()


@pytest.mark.django_db(transaction=True)
def test_a_fire_that_allows_overlap_is_recorded_ahead_and_one_that_skips_is_not(
    tenant, redis_client
):
    clock = ManualClock()
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    lock = LeaderLock(redis_client, key_prefix=prefix, node_id="ahead", ttl_seconds=3)
    engine = SchedulerEngine(lock=lock, config=_config(AHEAD), clock=clock)
    try:
        engine.load()
        # Created once the engine is up, and rung by its next tick (the change feed): the
        # fire is 1.8 s away, inside the 1.9 s lead.
        run_at = (clock() + timedelta(seconds=1.8)).isoformat()
        allowing = make_task(tenant, name="allow", schedule={"type": "once", "run_at": run_at})
        skipping = make_task(
            tenant,
            name="skip",
            schedule={"type": "once", "run_at": run_at},
            policy={"overlap": "skip"},
        )
        engine.tick()
        (early,) = TaskExecution.platform.filter(task=allowing)
        assert early.status == "queued" and early.created_at < early.scheduled_at
        assert not TaskExecution.platform.filter(task=skipping).exists()
        # The skipping task rings at its time, once; the allowing one is not fired again.
        clock.advance(1.8)
        engine.tick()
        (on_time,) = TaskExecution.platform.filter(task=skipping)
        assert on_time.created_at >= on_time.scheduled_at
        assert TaskExecution.platform.filter(task=allowing).count() == 1
    finally:
        engine.lock.release()


def test_a_burst_is_cut_into_one_message_per_worker_process():
    assert batch_size(833, 128, processes=8) == 105  # 8 messages
    assert batch_size(833, 64, processes=8) == 64  # the per-message limit still holds
    assert batch_size(15, 128, processes=8) == 1  # under two per process: one each
    assert batch_size(833, 128) == -(-833 // BURST_MESSAGES)  # fleet unknown


@pytest.mark.django_db
def test_the_fleet_size_counts_live_active_workers_only(redis_client, settings):
    settings.SCHEDULER = {
        **settings.SCHEDULER,
        "REDIS_KEY_PREFIX": f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:",
    }
    assert live_processes() == 0
    assert FirePublisher().fleet_processes() is None  # no worker yet: the default cut
    worker_record_save(make_worker_record("a@host", concurrency=4))
    worker_record_save(make_worker_record("b@host", concurrency=3))
    worker_record_save(make_worker_record("draining@host", concurrency=8, state=STATE_DRAINING))
    worker_record_save(make_worker_record("silent@host", concurrency=8, silent_for=3600))
    assert live_processes() == 7
    assert FirePublisher().fleet_processes() == 7
    keys = redis_client.keys(f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}*")
    redis_client.delete(*keys)


@pytest.mark.django_db(transaction=True)
def test_a_standby_shadows_a_leader_that_rings_ahead(tenant, redis_client):
    """The standby keeps its heap behind the leader; an entry that rings ahead is moved past
    the horizon by its lead, so the shadowing ends (it once popped the same entry forever)."""
    task = make_task(tenant, name="every-second", schedule={"type": "interval", "expression": "1s"})
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    clock, engines = ManualClock(), []
    for node in ("leader", "standby"):
        lock = LeaderLock(redis_client, key_prefix=prefix, node_id=node, ttl_seconds=3)
        engines.append(SchedulerEngine(lock=lock, config=_config(0.5), clock=clock))
    leader, standby = engines
    try:
        for engine in engines:
            engine.load()
        leader.tick()
        # Past two lock TTLs on the engines' clock, so the standby has something to shadow.
        clock.advance(2 * 3 + 1.2)
        leader.tick()
        standby.tick()
        assert leader.lock.is_held() and not standby.lock.is_held()
        entry = standby.heap.get(task.id)
        horizon = clock() - timedelta(seconds=2 * 3)
        assert horizon - timedelta(seconds=2) < entry.next_fire_at
        assert TaskExecution.platform.filter(task=task).count() == leader.fired_total
    finally:
        for engine in engines:
            engine.lock.release()
