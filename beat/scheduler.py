"""`celery -A project beat` runs this: Celery's beat hooks adapted to our engine.

Like django-celery-beat and celery-redbeat, it subclasses `celery.beat.Scheduler`;
unlike them, the schedule lives in the engine's heap, locking in `lock.py`, and
firing in `services.firing`.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import django
from celery import beat
from django.conf import settings

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from beat.shards import BeatRoster, ShardSet
from scheduler_app.redis_client import get_redis
from scheduler_app.shard_keys import roster_ttl, shard_key_prefix, shard_node_id

logger = logging.getLogger(__name__)


def _node_id() -> str:
    return os.environ.get("SCHEDULER_NODE_ID") or f"{socket.gethostname()}:{os.getpid()}"


class LeaderScheduler(beat.Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._engine = None
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        django.setup()

        config = settings.SCHEDULER
        engine_config = EngineConfig(
            tick_seconds=config["TICK_SECONDS"],
            batch_size=config["FIRE_BATCH_SIZE"],
            catchup_window_seconds=config["CATCHUP_WINDOW_SECONDS"],
            requeue_grace_seconds=config["REQUEUE_GRACE_SECONDS"],
            housekeeping_seconds=config["HOUSEKEEPING_SECONDS"],
            lock_ttl_seconds=config["LOCK_TTL_SECONDS"],
            lock_try_seconds=config["LOCK_TRY_SECONDS"],
            fire_ahead_seconds=config["FIRE_AHEAD_SECONDS"],
            fire_ahead_max_seconds=config["FIRE_AHEAD_MAX_SECONDS"],
        )
        shards = max(1, config["SHARDS"])
        node = _node_id()

        def engine(index: int) -> SchedulerEngine:
            lock = LeaderLock(
                get_redis(),
                key_prefix=shard_key_prefix(config["REDIS_KEY_PREFIX"], index),
                node_id=shard_node_id(node, index, shards),
                ttl_seconds=config["LOCK_TTL_SECONDS"],
            )
            return SchedulerEngine(lock=lock, config=engine_config, shard=(index, shards))

        if shards == 1:
            self._engine = engine(0)
        else:
            self._engine = ShardSet(
                [engine(index) for index in range(shards)],
                roster=BeatRoster(
                    get_redis(),
                    key_prefix=config["REDIS_KEY_PREFIX"],
                    node_id=node,
                    ttl=roster_ttl(config["LOCK_TTL_SECONDS"]),
                ),
                lock_ttl=config["LOCK_TTL_SECONDS"],
            )
        self._engine.load()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            return self._engine.tick()
        except Exception:
            # A database or Redis blip must not kill the scheduler: log, back off, go on.
            logger.exception("scheduler tick failed")
            return 1.0

    @property
    def schedule(self) -> dict:
        return {}

    def sync(self) -> None:
        """Nothing to sync: every fire is written to the database when it happens."""

    def close(self) -> None:
        if hasattr(self._engine, "engines"):  # a ShardSet: every shard, and the roster
            self._engine.close()
        elif self._engine is not None:
            self._engine.lock.release()
        super().close()

    @property
    def info(self) -> str:
        if self._engine is None:
            return "    . leader scheduler (not started)"
        lock = getattr(self._engine, "lock", None)
        if lock is None:
            return f"    . leader scheduler, {len(self._engine.engines)} shards"
        return f"    . leader scheduler node {lock.node_id}"
