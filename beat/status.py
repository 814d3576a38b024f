"""Each scheduler instance reports itself in Redis (role, heap size, last tick) for status views."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sized
from datetime import datetime
from typing import Protocol

import redis

from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

NODE_STATUS_TTL_SECONDS = 30


class _Lock(Protocol):
    node_id: str
    epoch: int | None


class ReportingEngine(Protocol):
    """What a status report reads of an engine (beat.engine.SchedulerEngine has it all)."""

    lock: _Lock
    heap: Sized
    fired_total: int
    published_total: int
    change_feed_lag_seconds: float
    change_feed_polled_at: datetime | None
    last_tick_at: datetime | None
    last_tick_seconds: float


def _timestamp(moment) -> float | None:
    return moment.timestamp() if moment is not None else None


def publish_node_status(engine: ReportingEngine, *, leading: bool) -> None:
    status = {
        "node": engine.lock.node_id,
        "role": "leader" if leading else "standby",
        "epoch": engine.lock.epoch if leading else None,
        "schedules": len(engine.heap),
        "heap_size": len(engine.heap),
        "fired_total": engine.fired_total,
        "published_total": engine.published_total,
        # How far behind the change feed this node's heap is (worst row of its last poll).
        "change_feed_lag_seconds": round(engine.change_feed_lag_seconds, 3),
        "change_feed_polled_at": _timestamp(engine.change_feed_polled_at),
        "last_tick_at": _timestamp(engine.last_tick_at),
        "last_tick_seconds": round(engine.last_tick_seconds, 4),
        "reported_at": time.time(),
    }
    try:
        get_redis().set(
            redis_key(f"scheduler:node:{engine.lock.node_id}"),
            json.dumps(status),
            ex=NODE_STATUS_TTL_SECONDS,
        )
    except redis.RedisError as error:
        logger.debug("could not publish scheduler status: %s", error)
