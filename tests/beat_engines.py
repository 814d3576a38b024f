"""Scheduler engines for the engine tests (tasks and DAGs alike): each with a real Redis
leader lock under a key prefix of its own test, released at the end."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock


@contextmanager
def engine_builder(redis_client, config: EngineConfig) -> Iterator[Callable[..., SchedulerEngine]]:
    """`build(node_id, own_lock=False, shard=None)`: a loaded engine; by default all share
    one lock, as in one fleet (`own_lock`: a lock of its own; `shard`: that shard's lock)."""
    fleet = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    engines: list[SchedulerEngine] = []

    def build(node_id: str = "alpha", *, own_lock: bool = False, shard=None) -> SchedulerEngine:
        prefix = f"{fleet}{node_id}:" if own_lock else fleet
        if shard is not None:
            prefix = f"{prefix}shard{shard[0]}:"
        lock = LeaderLock(redis_client, key_prefix=prefix, node_id=node_id, ttl_seconds=3)
        engine = SchedulerEngine(lock=lock, config=config, shard=shard)
        engine.load()
        engines.append(engine)
        return engine

    try:
        yield build
    finally:
        for engine in engines:
            engine.lock.release()
