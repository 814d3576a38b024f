"""The worker registry: who is alive, what it consumes, how loaded it is. Kept in Redis.

The registry is operational state, not a record: losing it loses no run (executions are
in PostgreSQL and their leases still expire). Each worker writes its own entry on every
heartbeat; anyone may read it, and anyone may declare a silent worker dead (the reaper is
idempotent: the conditional UPDATE on each execution lets one caller win).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from typing import NamedTuple

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

STATE_ACTIVE = "active"
STATE_DRAINING = "draining"
STATE_DEAD = "dead"
STATE_GONE = "gone"  # a clean shutdown: not dead, nothing to reap
# How long a dead or gone worker stays visible in the registry.
FORGET_AFTER_SECONDS = 3600
COMPLETION_BUCKET_SECONDS = 10
# Error rate over the last hour: per-minute buckets of finished and errored runs.
HOUR_BUCKET_SECONDS = 60


def sticky_queue_name(hostname: str) -> str:
    """The queue only this worker consumes (retries and next DAG nodes it should take)."""
    return f"worker.{hostname}"


@dataclass
class WorkerRecord:
    hostname: str
    queues: list[str]
    concurrency: int
    version: str
    pid: int
    started_at: float
    heartbeat_seconds: float
    last_heartbeat: float
    state: str = STATE_ACTIVE
    cpu_percent: float = 0.0
    memory_rss_bytes: int = 0
    memory_percent: float = 0.0
    active_runs: int = 0
    completed_last_minute: int = 0
    error_count: int = 0  # since the worker started
    completed_last_hour: int = 0
    errors_last_hour: int = 0
    # How this worker runs shell tasks: "on (...)", "off (...)" or "unavailable: why".
    shell_sandbox: str = ""
    # Handler types this worker can run (workers.capabilities.offered_capabilities).
    capabilities: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def silent_for(self, now: float) -> float:
        return now - self.last_heartbeat

    def is_overdue(self, now: float) -> bool:
        missed = settings.FLEET["MISSED_HEARTBEATS_DEAD"]
        return self.silent_for(now) > missed * self.heartbeat_seconds

    @property
    def free_slots(self) -> int:
        return max(0, self.concurrency - self.active_runs)

    @property
    def error_rate_last_hour(self) -> float | None:
        """Errored runs / finished runs over the last hour (None: nothing finished)."""
        if not self.completed_last_hour:
            return None
        return self.errors_last_hour / self.completed_last_hour

    def as_api(self, now: float) -> dict:
        data = asdict(self)
        data.pop("extra")
        data["free_slots"] = self.free_slots
        data["seconds_since_heartbeat"] = round(self.silent_for(now), 3)
        return data


def _record_key(hostname: str) -> str:
    return redis_key(f"fleet:worker:{hostname}")


def _members_key() -> str:
    return redis_key("fleet:workers")


def worker_record_save(record: WorkerRecord) -> None:
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.sadd(_members_key(), record.hostname)
    pipe.set(_record_key(record.hostname), json.dumps(asdict(record)))
    if record.state in (STATE_DEAD, STATE_GONE):
        pipe.expire(_record_key(record.hostname), FORGET_AFTER_SECONDS)
    pipe.execute()


def _record_from(raw: str) -> WorkerRecord:
    # Fields this version does not know (written by a newer worker in a rolling deploy)
    # are ignored rather than failing every reader.
    known = {f.name for f in fields(WorkerRecord)}
    return WorkerRecord(**{k: v for k, v in json.loads(raw).items() if k in known})


def worker_record_get(hostname: str) -> WorkerRecord | None:
    raw = get_redis().get(_record_key(hostname))
    return _record_from(raw) if raw else None


def worker_records() -> list[WorkerRecord]:
    client = get_redis()
    names = sorted(client.smembers(_members_key()))
    if not names:
        return []
    raws = client.mget([_record_key(name) for name in names])
    forgotten = [name for name, raw in zip(names, raws, strict=True) if raw is None]
    if forgotten:
        client.srem(_members_key(), *forgotten)
    return [_record_from(raw) for raw in raws if raw]


def live_processes(now: float | None = None) -> int:
    """How many runs the fleet's live, active workers take at once (their concurrency)."""
    now = time.time() if now is None else now
    return sum(
        record.concurrency
        for record in worker_records()
        if record.state == STATE_ACTIVE and not record.is_overdue(now)
    )


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
