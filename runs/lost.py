"""Runs whose worker is gone, and runs no worker can take. A lost run goes back to the queue
as the same attempt (`scheduler_app.services.losses`, up to WORKER_LOST_REQUEUES times);
an ended one (its requeues spent, or unrunnable) is ended by the core's compare-and-swap (one
reaper wins each) and settled like any finish (its DAG node, counters, notices). The beat's
housekeeping runs these chores (`chores_register`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import transaction

from runs.settle import run_settled
from scheduler_app.capabilities import PARTIAL_CAPABILITIES
from scheduler_app.fleet.capabilities import live_capabilities
from scheduler_app.housekeeping import Chore, chore_register
from scheduler_app.services.executions import (
    FinishReport,
    execution_unrunnable_fail,
    expired_lease_ids,
    unrunnable_waiting_ids,
)
from scheduler_app.services.fleet import worker_running_claims
from scheduler_app.services.losses import (
    LossReport,
    execution_lease_lost,
    execution_worker_lost,
)

logger = logging.getLogger(__name__)


def _ended_and_settled(end: Callable[[], FinishReport]) -> bool:
    """`end()` (one of the core's compare-and-swap endings) and, when this caller won, its
    settling, in one transaction. Whether this caller won."""
    with transaction.atomic():
        report = end()
        if report.accepted:
            run_settled(report=report)
        return report.accepted


def _lost_and_settled(lose: Callable[[], LossReport]) -> bool:
    """`lose()` (a requeue, or a `worker_lost` failure once the requeues are spent) and, for
    a failure this caller won, its settling, in one transaction. A requeue settles nothing:
    the run has not ended. Whether this caller won."""
    with transaction.atomic():
        report = lose()
        if report.finish.accepted:
            run_settled(report=report.finish)
        return report.accepted


def run_lease_expired_lose(*, execution_id: uuid.UUID, now: datetime | None = None) -> bool:
    """A running run whose lease expired: re-queued, or failed (`worker_lost`) and retried."""
    return _lost_and_settled(lambda: execution_lease_lost(execution_id=execution_id, now=now))


def expired_leases_reap(*, now: datetime | None = None, limit: int = 500) -> int:
    """Re-queue (or fail) every running run whose lease has expired, by PostgreSQL's clock
    unless `now` is given (never this process's: a reaper whose clock was stepped 30 s ahead
    took every live run's lease for expired). Returns how many this call won."""
    return sum(
        run_lease_expired_lose(execution_id=execution_id, now=now)
        for execution_id in expired_lease_ids(now=now, limit=limit)
    )


def worker_runs_lose(*, worker_id: str, reason: str, claimed_before: datetime | None = None) -> int:
    """Re-queue (or fail) every run a dead (or restarted) worker held. Returns how many this
    caller won (of several reapers, one wins each run)."""
    return sum(
        _lost_and_settled(
            lambda execution_id=execution_id, claim_token=claim_token: execution_worker_lost(
                execution_id=execution_id,
                claim_token=claim_token,
                worker_id=worker_id,
                reason=reason,
            )
        )
        for execution_id, claim_token in worker_running_claims(
            worker_id=worker_id, claimed_before=claimed_before
        )
    )


def executions_without_capable_worker_fail(
    *, offered: set[str], now: datetime, wait_seconds: float, limit: int = 500
) -> int:
    """Fail the waiting runs that need a capability no live worker offers, once they have
    waited `wait_seconds` past their time: `failed`, error_class `no_capable_worker` naming
    the capability, dead-lettered (a retry from the DLQ once such a worker runs). A run whose
    capability some worker offers waits however long the queue is."""
    failed = 0
    for capability in PARTIAL_CAPABILITIES:
        if capability in offered:
            continue
        waiting = unrunnable_waiting_ids(
            capability=capability, now=now, wait_seconds=wait_seconds, limit=limit
        )
        failed += sum(
            _ended_and_settled(
                lambda execution_id=execution_id, capability=capability: execution_unrunnable_fail(
                    execution_id=execution_id, capability=capability, now=now
                )
            )
            for execution_id in waiting
        )
    return failed


def _leases_chore(now: datetime) -> None:
    reaped = expired_leases_reap()  # by PostgreSQL's clock, not the tick's `now`
    if reaped:
        logger.warning("reaped %d runs whose worker stopped renewing its lease", reaped)


def _unrunnable_chore(now: datetime) -> None:
    unrunnable = executions_without_capable_worker_fail(
        offered=live_capabilities(),
        now=now,
        wait_seconds=settings.SCHEDULER["CAPABILITY_WAIT_SECONDS"],
    )
    if unrunnable:
        logger.warning("%d runs waited too long for a capable worker", unrunnable)


def chores_register() -> None:
    chore_register(Chore("expired-leases", _leases_chore, leader_only=False))
    chore_register(Chore("unrunnable-runs", _unrunnable_chore))
