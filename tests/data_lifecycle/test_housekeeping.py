"""The beat leader's housekeeping keeps partitions two months ahead."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from data_lifecycle import beat_hook
from scheduler_app import partitions

# The engine closes stale connections each tick, as the beat process does: real commits.
pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=100,
    catchup_window_seconds=300,
    requeue_grace_seconds=60,
    housekeeping_seconds=1,
    lock_ttl_seconds=3,
)


def _exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [name])
        return cursor.fetchone()[0] is not None


def test_the_leader_creates_missing_partitions_two_months_ahead(redis_client, monkeypatch):
    ahead = partitions.partition_name(
        partitions.add_months(partitions.month_start(timezone.now()), 2)
    )
    partitions.partition_drop(name=ahead)
    assert not _exists(ahead)
    monkeypatch.setattr(beat_hook, "_last_run", {})
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    standby_lock = LeaderLock(redis_client, key_prefix=prefix, node_id="b", ttl_seconds=3)
    leader_lock = LeaderLock(redis_client, key_prefix=prefix, node_id="a", ttl_seconds=3)
    leader = SchedulerEngine(lock=leader_lock, config=CONFIG)
    leader.load()
    try:
        leader.tick()
        assert leader.lock.is_held()
        assert _exists(ahead)
        # A standby does no housekeeping DDL.
        partitions.partition_drop(name=ahead)
        monkeypatch.setattr(beat_hook, "_last_run", {})
        standby = SchedulerEngine(lock=standby_lock, config=CONFIG)
        standby.load()
        standby.tick()
        assert not standby.lock.is_held()
        assert not _exists(ahead)
    finally:
        leader_lock.release()
        partitions.partitions_ensure(now=timezone.now())
