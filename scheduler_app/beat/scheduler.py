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

from celery import beat

logger = logging.getLogger(__name__)


def _node_id() -> str:
    return os.environ.get("SCHEDULER_NODE_ID") or f"{socket.gethostname()}:{os.getpid()}"


class LeaderScheduler(beat.Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._engine = None
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        import django

        django.setup()
        from django.conf import settings

        from scheduler_app.beat.engine import EngineConfig, SchedulerEngine
        from scheduler_app.beat.lock import LeaderLock
        from scheduler_app.redis_client import get_redis

        config = settings.SCHEDULER
        lock = LeaderLock(
            get_redis(),
            key_prefix=config["REDIS_KEY_PREFIX"],
            node_id=_node_id(),
            ttl_seconds=config["LOCK_TTL_SECONDS"],
        )
        self._engine = SchedulerEngine(
            lock=lock,
            config=EngineConfig(
                tick_seconds=config["TICK_SECONDS"],
                batch_size=config["FIRE_BATCH_SIZE"],
                catchup_window_seconds=config["CATCHUP_WINDOW_SECONDS"],
                requeue_grace_seconds=config["REQUEUE_GRACE_SECONDS"],
                housekeeping_seconds=config["HOUSEKEEPING_SECONDS"],
                lock_ttl_seconds=config["LOCK_TTL_SECONDS"],
                lock_try_seconds=config["LOCK_TRY_SECONDS"],
                fire_ahead_seconds=config["FIRE_AHEAD_SECONDS"],
                capability_wait_seconds=config["CAPABILITY_WAIT_SECONDS"],
            ),
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
        if self._engine is not None:
            self._engine.lock.release()
        super().close()

    @property
    def info(self) -> str:
        if self._engine is None:
            return "    . leader scheduler (not started)"
        return f"    . leader scheduler node {self._engine.lock.node_id}"
