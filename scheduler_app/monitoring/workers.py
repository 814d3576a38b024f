"""The worker list the dashboard's Workers page and /metrics read: the fleet registry
(scheduler_app/fleet/records.py), which every worker refreshes on each heartbeat with its
CPU, memory, active runs and finished/errored counts. Reading it is one SMEMBERS and one
MGET, so pages that poll every few seconds cost Redis almost nothing and wait on no worker.

States: `active`, `draining` (shutting down, finishing what it holds), `unresponsive` (its
heartbeats stopped; the reaper will declare it dead and re-queue its runs),
`dead` (declared dead by a peer) and `gone` (a clean shutdown). Dead and gone workers stay
listed for an hour (fleet_registry.FORGET_AFTER_SECONDS).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from scheduler_app.fleet.records import STATE_ACTIVE, STATE_DRAINING, WorkerRecord, worker_records

STATE_UNRESPONSIVE = "unresponsive"
WORKER_STATES = ("active", "draining", STATE_UNRESPONSIVE, "dead", "gone")
ALIVE_STATES = (STATE_ACTIVE, STATE_DRAINING)


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    state: str  # one of WORKER_STATES
    heartbeat_age_seconds: float
    cpu_percent: float  # the worker and its pool processes; 100 = one core
    memory_rss_bytes: int
    memory_percent: float
    active_runs: int
    concurrency: int
    queues: tuple[str, ...]
    version: str
    completed_last_hour: int
    errors_last_hour: int
    capabilities: tuple[str, ...] = ()

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    @property
    def error_rate(self) -> float | None:
        if not self.completed_last_hour:
            return None
        return self.errors_last_hour / self.completed_last_hour


def _state(record: WorkerRecord, now: float) -> str:
    if record.state in ALIVE_STATES and record.is_overdue(now):
        return STATE_UNRESPONSIVE
    return record.state


def worker_list(*, now: float | None = None) -> list[WorkerInfo]:
    """Every registered worker, by name. Raises redis.RedisError when Redis is unreachable."""
    now = time.time() if now is None else now
    return [
        WorkerInfo(
            name=record.hostname,
            state=_state(record, now),
            heartbeat_age_seconds=max(0.0, record.silent_for(now)),
            cpu_percent=record.cpu_percent,
            memory_rss_bytes=record.memory_rss_bytes,
            memory_percent=record.memory_percent,
            active_runs=record.active_runs,
            concurrency=record.concurrency,
            queues=tuple(record.queues),
            version=record.version,
            completed_last_hour=record.completed_last_hour,
            errors_last_hour=record.errors_last_hour,
            capabilities=tuple(record.capabilities),
        )
        for record in sorted(worker_records(), key=lambda r: r.hostname)
    ]


def shell_sandbox_by_worker(*, now: float | None = None) -> dict[str, str]:
    """How each live worker runs shell tasks ("on (...)", "off (...)", "unavailable: why"),
    as it reported at start; {} when Redis is unreachable (readiness says so already)."""

    now = time.time() if now is None else now
    try:
        records = worker_records()
    except redis.RedisError:
        return {}
    return {
        record.hostname: record.shell_sandbox
        for record in records
        if _state(record, now) in ALIVE_STATES and record.shell_sandbox
    }
