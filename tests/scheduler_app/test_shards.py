"""Shard assignment: stable, the same in Python and PostgreSQL, and an engine loads and
follows only its own shard's tasks."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from scheduler_app.shard_keys import shard_key_prefix, shard_of, shard_sql

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("shards", [2, 3, 4, 7])
def test_postgresql_computes_the_same_shard_as_python(shards):
    ids = [uuid.uuid4() for _ in range(200)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, {shard_sql('id', shards)} FROM unnest(%s::uuid[]) AS t(id)", [ids]
        )
        in_sql = dict(cursor.fetchall())
    assert {i: shard_of(i, shards) for i in ids} == in_sql
    assert set(in_sql.values()) == set(range(shards))


def test_shard_zero_keeps_the_unsharded_keys():
    assert shard_key_prefix("sched:", 0) == "sched:"
    assert shard_key_prefix("sched:", 3) == "sched:shard-3:"


def test_an_engine_loads_only_its_shard(tenant):
    from django.conf import settings

    from beat.engine import EngineConfig, SchedulerEngine
    from beat.lock import LeaderLock
    from scheduler_app.redis_client import get_redis
    from tests.factories import make_task

    tasks = [
        make_task(tenant, name=f"t{i}", schedule={"type": "cron", "expression": "* * * * *"})
        for i in range(24)
    ]
    config = EngineConfig(
        tick_seconds=0.5,
        batch_size=100,
        catchup_window_seconds=300,
        requeue_grace_seconds=300,
        housekeeping_seconds=2,
        lock_ttl_seconds=1.5,
    )
    loaded = {}
    for index in range(3):
        engine = SchedulerEngine(
            lock=LeaderLock(
                get_redis(),
                key_prefix=settings.SCHEDULER["REDIS_KEY_PREFIX"],
                node_id="t",
                ttl_seconds=1.5,
            ),
            config=config,
            shard=(index, 3),
        )
        engine.load()
        loaded[index] = {task.id for task in tasks if task.id in engine.heap}
        assert len(engine.heap) == len(loaded[index])
        assert engine.fleet_duties == (index == 0)
    assert sorted(i for ids in loaded.values() for i in ids) == sorted(t.id for t in tasks)
    for index, ids in loaded.items():
        assert all(shard_of(i, 3) == index for i in ids)
