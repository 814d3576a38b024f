"""A run whose worker is gone (its heartbeats stopped, or its lease expired): back to the
queue as the same attempt, up to `WORKER_LOST_REQUEUES` times, and only then a failed attempt
(`worker_lost`) that spends a retry. A lost worker is the platform's failure, not the task's:
a `max_attempts: 1` task must not be dead-lettered because its host died (the design
document: a dead worker's in-progress tasks "are re-queued for execution by other workers").

Exactly once still holds: the requeue clears the claim token and the lease in the same
conditional UPDATE, so the old worker, if it was only partitioned (a zombie), cannot finish
the row (`executions_finish` matches the token), and the next claim is a new compare-and-swap
with a new token. The zombie is also told to stop (the abandon signal a drain uses), for when
it can reach Redis again. Each loss is one `ExecutionLoss` row, written under the
execution's row lock, so of several reapers of one loss exactly one writes it and the count
of requeues is never overrun.

The caller settles a failed attempt (`runs.lost`); a requeue has nothing to settle (the run
did not end: its DAG node stays running, no finish is counted) and is rung after commit. A
requeued run keeps its flow-control slots for one more lease, so it takes them back before the
runs that waited behind it (`_requeue`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import ExecutionLoss, LossOutcome, TaskExecution
from scheduler_app.monitoring.counters import record_run_lost
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.executions import FinishReport, execution_next_attempt_or_dead_letter
from scheduler_app.services.run_signals import abandon_request

logger = logging.getLogger(__name__)

WORKER_LOST = "worker_lost"
LEASE_EXPIRED = "the worker running this attempt stopped renewing its lease"


@dataclass(frozen=True)
class LossReport:
    """What one loss did: `requeued` (the same attempt back in the queue, rung after
    commit), or `finish` (the attempt failed `worker_lost`: the caller settles it). Neither
    when another reaper (or the worker's own finish) had already taken the row."""

    requeued: bool = False
    finish: FinishReport = field(default_factory=lambda: FinishReport(accepted=False))

    @property
    def accepted(self) -> bool:
        return self.requeued or self.finish.accepted


def execution_lease_lost(*, execution_id: uuid.UUID, now: datetime | None = None) -> LossReport:
    """A running execution whose lease expired (a hung or partitioned worker, whatever its
    registry entry says): re-queued, or failed once its requeues are spent. Expired by
    PostgreSQL's clock unless `now` is given, never the reaper's own (it may be stepped)."""
    expired = Now() if now is None else now
    return _lose(
        Q(id=execution_id, status=ExecutionStatus.RUNNING, lease_expires_at__lt=expired),
        reason=LEASE_EXPIRED,
        now=now or timezone.now(),
    )


def execution_worker_lost(
    *, execution_id: uuid.UUID, claim_token: uuid.UUID, worker_id: str, reason: str
) -> LossReport:
    """A run of a worker found dead, for this very claim (a claim taken since by another
    worker is not touched): re-queued, or failed once its requeues are spent."""
    return _lose(
        Q(
            id=execution_id,
            status=ExecutionStatus.RUNNING,
            claim_token=claim_token,
            worker_id=worker_id,
        ),
        reason=reason,
        now=timezone.now(),
    )


def _lose(still_running: Q, *, reason: str, now: datetime) -> LossReport:
    with transaction.atomic(savepoint=False):
        # The row lock orders the reapers of one loss: the second one re-reads the row after
        # the first commits and finds it no longer running (or no longer this claim's).
        execution = (
            TaskExecution.platform.select_for_update(of=("self",))
            .select_related("task")
            .filter(still_running)
            .first()
        )
        if execution is None:
            return LossReport()
        requeues = ExecutionLoss.objects.filter(
            tenant_id=execution.tenant_id,
            execution_id=execution.id,
            attempt=execution.attempt,
            outcome=LossOutcome.REQUEUED,
        ).count()
        requeue = requeues < settings.FLEET["LOST_REQUEUES"]
        outcome = LossOutcome.REQUEUED if requeue else LossOutcome.FAILED
        ExecutionLoss.objects.create(
            tenant_id=execution.tenant_id,
            execution_id=execution.id,
            attempt=execution.attempt,
            worker_id=execution.worker_id,
            reason=reason[:10000],
            outcome=outcome,
            lost_at=now,
        )
        counted = {"tenant_id": str(execution.tenant_id), "tier": execution.queue}
        transaction.on_commit(lambda: record_run_lost(**counted, outcome=outcome.value))
        if requeue:
            _requeue(execution, now=now)
            return LossReport(requeued=True)
        return LossReport(finish=_fail(execution, reason=reason, now=now))


def _requeue(execution: TaskExecution, *, now: datetime) -> None:
    """running -> queued, the same attempt and row (as a drain's release), rung after
    commit. The handler's checkpoint stays with the run's chain, so the next claim
    resumes it (`workers.checkpoints`).

    A run that held flow-control slots keeps them for one more lease (its `flow_holds`
    stay, and `lease_expires_at` says until when they are kept): the dead worker holds
    nothing any more, but the slot goes back to this run, the oldest of its key, ahead of
    the runs that waited behind it (due order), instead of to whichever waiter a worker
    happens to claim first. Its next claim carries the kept slots into its admission
    (`services.claims`, `services.flow_admission`); unclaimed by then, they are free."""
    claim_token = execution.claim_token
    kept_until = (
        now + timedelta(seconds=settings.WORKER["LEASE_SECONDS"]) if execution.flow_holds else None
    )
    TaskExecution.platform.filter(id=execution.id).update(
        status=ExecutionStatus.QUEUED,
        queued_at=now,
        started_at=None,
        claim_token=None,
        lease_expires_at=kept_until,
        worker_id="",
        updated_at=now,
    )
    bell = Doorbell(
        str(execution.id),
        str(execution.tenant_id),
        execution.queue,
        traceparent=execution.traceparent or "",
    )

    def after_commit() -> None:
        # Redis down: the leader's requeue sweep rings a queued run nobody started.
        try:
            if claim_token is not None:
                abandon_request(claim_tokens=[str(claim_token)])
            ring([bell], reason=RingReason.WORKER_LOST)
        except Exception:
            logger.exception("could not ring re-queued run %s; the requeue sweep will", bell)

    transaction.on_commit(after_commit)


def _fail(execution: TaskExecution, *, reason: str, now: datetime) -> FinishReport:
    ended = {
        "status": ExecutionStatus.FAILED,
        "completed_at": now,
        "error_class": WORKER_LOST,
        "error_message": reason[:10000],
        "claim_token": None,
        "lease_expires_at": None,
        "updated_at": now,
    }
    TaskExecution.platform.filter(id=execution.id).update(**ended)
    for name, value in ended.items():  # the row as it ended, for the settling
        setattr(execution, name, value)
    return execution_next_attempt_or_dead_letter(
        execution=execution, task=execution.task, transient=True, now=now
    )
