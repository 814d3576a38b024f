"""The worker registry's records: who is alive, what it consumes, how loaded it is. Kept in
Redis.

The registry is operational state, not a record: losing it loses no run (executions are
in PostgreSQL and their leases still expire). Each worker writes its own entry on every
heartbeat (`workers.fleet_membership`, with the counters of `scheduler_app.fleet.registry`);
anyone may read it: publishing (sticky routing, how a burst is cut), monitoring, the API. It
lives in the core, not in `workers`, so that ringing a doorbell never imports the worker side.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

STATE_ACTIVE = "active"
STATE_DRAINING = "draining"
STATE_DEAD = "dead"
STATE_GONE = "gone"  # a clean shutdown: not dead, nothing to reap
# How long a dead or gone worker stays visible in the registry.
FORGET_AFTER_SECONDS = 3600


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
    # Handler types this worker can run (scheduler_app.fleet.capabilities.offered_capabilities).
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
