"""The worker registry: who is alive, what it consumes, how loaded it is. Kept in Redis.

The records themselves (and reading them) are in `scheduler_app.fleet.records`, which
publishing reads without importing the worker side; re-exported here for the worker's own
modules. This module adds what only the fleet does: declaring a worker dead, and the
counters the pool processes feed and the heartbeat reads.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from scheduler_app.fleet.records import (
    FORGET_AFTER_SECONDS,
    STATE_ACTIVE,
    STATE_DEAD,
    STATE_DRAINING,
    STATE_GONE,
    WorkerRecord,
    live_processes,
    sticky_queue_name,
    worker_record_get,
    worker_record_save,
    worker_records,
)
from scheduler_app.redis_client import get_redis, redis_key

__all__ = [
    "FORGET_AFTER_SECONDS",
    "STATE_ACTIVE",
    "STATE_DEAD",
    "STATE_DRAINING",
    "STATE_GONE",
    "WorkerRecord",
    "live_processes",
    "registry_now",
    "sticky_queue_name",
    "worker_mark_dead",
    "worker_record_get",
    "worker_record_save",
    "worker_records",
]

COMPLETION_BUCKET_SECONDS = 10
# Error rate over the last hour: per-minute buckets of finished and errored runs.
HOUR_BUCKET_SECONDS = 60


def registry_now() -> float:
    """The registry's clock (Redis's own, Unix seconds): the one every reaper judges a
    heartbeat's age by. A reaper's own wall clock may be stepped (NTP, a VM resumed): one
    30 s ahead found every live worker silent for 30 s and handed their running runs to
    other processes while they ran them."""
    seconds, microseconds = get_redis().time()
    return seconds + microseconds / 1_000_000


def worker_mark_dead(record: WorkerRecord) -> bool:
    """active|draining -> dead, once: True for the caller that flipped it."""
    client = get_redis()
    claimed = client.set(
        redis_key(f"fleet:dead:{record.hostname}:{record.started_at}"),
        "1",
        nx=True,
        ex=FORGET_AFTER_SECONDS,
    )
    record.state = STATE_DEAD
    worker_record_save(record)
    return bool(claimed)


# -- counters the pool processes feed and the heartbeat reads -------------------------
def _active_key(hostname: str) -> str:
    return redis_key(f"fleet:active:{hostname}")


def _errors_key(hostname: str) -> str:
    return redis_key(f"fleet:errors:{hostname}")


def _done_key(hostname: str, bucket: int) -> str:
    return redis_key(f"fleet:done:{hostname}:{bucket}")


def _hour_done_key(hostname: str, minute: int) -> str:
    return redis_key(f"fleet:done-m:{hostname}:{minute}")


def _hour_errors_key(hostname: str, minute: int) -> str:
    return redis_key(f"fleet:errors-m:{hostname}:{minute}")


def counters_reset(hostname: str) -> None:
    get_redis().delete(_active_key(hostname), _errors_key(hostname))


def run_started(hostname: str) -> None:
    get_redis().incr(_active_key(hostname))


def run_started_into(pipe, hostname: str) -> None:
    pipe.incr(_active_key(hostname))


def run_not_started_into(pipe, hostname: str) -> None:
    """Undo `run_started_into` (a claimed run that did not run after all)."""
    pipe.decr(_active_key(hostname))


def run_ended(hostname: str, *, errored: bool) -> None:
    pipe = get_redis().pipeline(transaction=False)
    run_ended_into(pipe, hostname, errored=errored)
    pipe.execute()


def run_ended_into(pipe, hostname: str, *, errored: bool) -> None:
    now = time.time()
    bucket = int(now // COMPLETION_BUCKET_SECONDS)
    minute = int(now // HOUR_BUCKET_SECONDS)
    pipe.decr(_active_key(hostname))
    pipe.incr(_done_key(hostname, bucket))
    pipe.expire(_done_key(hostname, bucket), 120)
    pipe.incr(_hour_done_key(hostname, minute))
    pipe.expire(_hour_done_key(hostname, minute), 3600 + 2 * HOUR_BUCKET_SECONDS)
    if errored:
        pipe.incr(_errors_key(hostname))
        pipe.incr(_hour_errors_key(hostname, minute))
        pipe.expire(_hour_errors_key(hostname, minute), 3600 + 2 * HOUR_BUCKET_SECONDS)


class FleetCounters(NamedTuple):
    active_runs: int
    completed_last_minute: int
    error_count: int  # since start
    completed_last_hour: int
    errors_last_hour: int


def counters_read(hostname: str) -> FleetCounters:
    """What the pool processes counted, as the heartbeat publishes it (one MGET)."""
    now = time.time()
    now_bucket = int(now // COMPLETION_BUCKET_SECONDS)
    now_minute = int(now // HOUR_BUCKET_SECONDS)
    per_minute = 60 // COMPLETION_BUCKET_SECONDS
    per_hour = 3600 // HOUR_BUCKET_SECONDS
    keys = [_active_key(hostname), _errors_key(hostname)]
    keys += [_done_key(hostname, now_bucket - i) for i in range(per_minute)]
    keys += [_hour_done_key(hostname, now_minute - i) for i in range(per_hour)]
    keys += [_hour_errors_key(hostname, now_minute - i) for i in range(per_hour)]
    values = [int(v or 0) for v in get_redis().mget(keys)]
    minute_end = 2 + per_minute
    hour_end = minute_end + per_hour
    return FleetCounters(
        active_runs=max(0, values[0]),
        completed_last_minute=sum(values[2:minute_end]),
        error_count=values[1],
        completed_last_hour=sum(values[minute_end:hour_end]),
        errors_last_hour=sum(values[hour_end:]),
    )
