"""Declaring silent workers dead and re-queueing the runs they held (or failing them as
`worker_lost` once their requeues are spent: `scheduler_app.services.losses`).

Runs in every worker's heartbeat thread and in the beat leader's housekeeping: any number
of reapers may see the same dead worker, and the per-execution conditional UPDATE lets one
of them win, so each lost run is re-queued (or gets its next attempt) exactly once. A hung
worker whose registry entry still looks alive is covered by the lease reaper
(`expired_leases_reap`).
"""

from __future__ import annotations

import logging

from runs.lost import worker_runs_lose
from scheduler_app.fleet.registry import (
    STATE_ACTIVE,
    STATE_DEAD,
    STATE_DRAINING,
    registry_now,
    worker_mark_dead,
    worker_records,
)
from scheduler_app.housekeeping import Chore, chore_register
from scheduler_app.services.fleet import worker_kept_runs_ring

logger = logging.getLogger(__name__)

# After a worker is found dead, keep sweeping its runs this long (a reaper that crashed
# half-way, a claim that committed just after the first sweep).
SWEEP_DEAD_FOR_SECONDS = 120


def dead_workers_reap() -> int:
    """Returns how many running executions this call re-queued or failed (`worker_lost`).
    Never raises: it runs inside the beat's tick and the heartbeat loop."""
    try:
        return _reap()
    except Exception:
        logger.exception("dead-worker reaping failed; the lease reaper still covers it")
        return 0


def _reap() -> int:
    # Heartbeats are aged by the registry's clock, never this process's: a reaper whose
    # wall clock was stepped ahead would find every live worker silent.
    now = registry_now()
    lost = 0
    for record in worker_records():
        overdue = record.state in (STATE_ACTIVE, STATE_DRAINING) and record.is_overdue(now)
        if overdue and worker_mark_dead(record):
            logger.warning(
                "worker %s missed its heartbeats (silent %.1fs): marked dead",
                record.hostname,
                record.silent_for(now),
            )
        if record.state == STATE_DEAD and record.silent_for(now) < SWEEP_DEAD_FOR_SECONDS:
            lost += worker_runs_lose(
                worker_id=record.hostname,
                reason=f"worker {record.hostname} stopped sending heartbeats",
            )
            rung = worker_kept_runs_ring(worker_id=record.hostname)
            if rung:
                logger.warning(
                    "rang %d queued runs dead worker %s had kept for itself", rung, record.hostname
                )
    if lost:
        logger.warning("re-queued (or failed, requeues spent) %d runs of dead workers", lost)
    return lost


def chores_register() -> None:
    # Idempotent, and every worker's heartbeat runs it too: every beat may.
    chore_register(Chore("dead-workers", lambda now: dead_workers_reap(), leader_only=False))
