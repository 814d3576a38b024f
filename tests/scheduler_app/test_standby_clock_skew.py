"""A standby whose wall clock runs ahead (an NTP step, a VM resumed) must not move its heap
past what the leader has recorded: found by the nemesis (tests/chaos/test_nemesis.py, seed
31), where a standby stepped +30 s shadowed to its own "now minus two TTLs", 27 s into the
future, then took over from a frozen leader, and 19 s of every task's fires were never
recorded."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.conf import settings

from beat.engine import SchedulerEngine
from beat.lock import LeaderLock
from scheduler_app.models import TaskExecution
from tests.clock import ManualClock
from tests.factories import make_task
from tests.scheduler_app.test_fire_ahead import _config

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_standby_whose_clock_runs_ahead_skips_no_fire_the_leader_has_not_recorded(
    tenant, redis_client
):
    task = make_task(tenant, name="every-second", schedule={"type": "interval", "expression": "1s"})
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    clock = ManualClock()
    skew = timedelta(0)

    def standby_clock():
        return clock() + skew

    def engine(node, engine_clock):
        lock = LeaderLock(redis_client, key_prefix=prefix, node_id=node, ttl_seconds=3)
        return SchedulerEngine(lock=lock, config=_config(0.0), clock=engine_clock)

    leader, standby = engine("leader", clock), engine("standby", standby_clock)
    try:
        for each in (leader, standby):
            each.load()
        clock.advance(1.1)
        leader.tick()
        assert leader.lock.is_held()
        recorded_through = max(
            TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True)
        )
        skew = timedelta(seconds=30)  # the standby's clock stepped ahead
        standby.tick()
        skew = timedelta(0)  # and back, before the leader dies
        leader.lock._stop.set()
        leader.lock._redis.delete(leader.lock.lock_key)
        clock.advance(2.0)
        standby.tick()
        assert standby.lock.is_held()
        times = set(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))
        owed = [recorded_through + timedelta(seconds=n) for n in (1, 2)]
        assert all(moment in times for moment in owed), (sorted(times), owed)
    finally:
        for each in (leader, standby):
            each.lock.release()
