"""Execution transitions driven by the worker fleet: a worker is draining, a dead worker's
kept runs, an operator cancels a run (a dead worker's running runs: `services.losses`). Each
is a conditional UPDATE, so any number of reapers or repeated requests change a row once."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.utils import timezone

from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus
from scheduler_app.errors import Conflict
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.audit import audit_action
from scheduler_app.services.run_signals import cancel_request

logger = logging.getLogger(__name__)


def worker_running_claims(
    *, worker_id: str, claimed_before: datetime | None = None, limit: int = 5000
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(execution id, claim token) of the runs `worker_id` holds as running."""
    running = TaskExecution.platform.filter(status=ExecutionStatus.RUNNING, worker_id=worker_id)
    if claimed_before is not None:
        running = running.filter(started_at__lt=claimed_before)
    return list(running.values_list("id", "claim_token")[:limit])


def worker_kept_runs_ring(*, worker_id: str) -> int:
    """Queued runs a worker had kept for itself (a DAG node it was to run right after the
    finish that made it ready, `dags.engine.dispatch`) and never claimed: their rows
    carry its worker id and no doorbell was rung. When that worker is dead they are handed
    to the fleet (worker id cleared, doorbell rung) instead of waiting for the requeue
    grace. A conditional UPDATE per row: of several reapers, one rings each."""
    waiting = TaskExecution.platform.filter(status=ExecutionStatus.QUEUED, worker_id=worker_id)
    bells: list[Doorbell] = []
    now = timezone.now()
    kept = waiting.values_list("id", "tenant_id", "queue", "traceparent")[:5000]
    for execution_id, tenant_id, queue, traceparent in kept:
        taken = TaskExecution.platform.filter(
            id=execution_id, status=ExecutionStatus.QUEUED, worker_id=worker_id
        ).update(worker_id="", queued_at=now, updated_at=now)
        if taken:
            bells.append(_bell(execution_id, tenant_id, queue, traceparent))
    # Each rung again in its run's trace, the ring span saying why.
    return ring(bells, reason=RingReason.DEAD_WORKER) if bells else 0


def worker_executions_release(*, worker_id: str) -> list[tuple[Doorbell, uuid.UUID]]:
    """A draining worker gives its unfinished runs back: running -> queued, same attempt.

    Not a failure: the run did not fail, its worker left. The claim token is cleared, so a
    late finish from the old process is rejected. Returns the doorbells to ring again, each
    with the claim token it released (the old process is told to stop by that token)."""
    released: list[tuple[Doorbell, uuid.UUID]] = []
    running = TaskExecution.platform.filter(status=ExecutionStatus.RUNNING, worker_id=worker_id)
    for execution_id, claim_token, tenant_id, queue, traceparent in running.values_list(
        "id", "claim_token", "tenant_id", "queue", "traceparent"
    ):
        if _release(execution_id=execution_id, claim_token=claim_token):
            released.append((_bell(execution_id, tenant_id, queue, traceparent), claim_token))
    return released


def execution_hand_back(
    *,
    execution_id: uuid.UUID,
    claim_token: uuid.UUID,
    tenant_id: uuid.UUID,
    queue: str,
    traceparent: str = "",
) -> Doorbell | None:
    """One run whose handler stopped for its worker's preemption (after checkpointing):
    running -> queued, the same attempt, as `worker_executions_release` does for the runs
    still going at the drain's deadline. Returns the doorbell to ring, or None when the
    claim was no longer this one's (the run was already released or reaped)."""
    if not _release(execution_id=execution_id, claim_token=claim_token):
        return None
    return _bell(execution_id, tenant_id, queue, traceparent)


def _bell(execution_id: object, tenant_id: object, queue: str, traceparent: str) -> Doorbell:
    # The row's trace context: the run is rung again in its own trace (the ring's span).
    return Doorbell(str(execution_id), str(tenant_id), queue, traceparent=traceparent or "")


def _release(*, execution_id: uuid.UUID, claim_token: uuid.UUID) -> bool:
    now = timezone.now()
    updated = TaskExecution.platform.filter(
        id=execution_id, status=ExecutionStatus.RUNNING, claim_token=claim_token
    ).update(
        status=ExecutionStatus.QUEUED,
        queued_at=now,
        started_at=None,
        claim_token=None,
        lease_expires_at=None,
        worker_id="",
        updated_at=now,
    )
    return bool(updated)


def execution_cancel_waiting(*, execution_id: uuid.UUID) -> bool:
    """pending|queued -> cancelled: the claim then finds nothing, so it never starts."""
    now = timezone.now()
    return (
        TaskExecution.platform.filter(id=execution_id, status__in=WAITING_STATUSES).update(
            status=ExecutionStatus.CANCELLED,
            completed_at=now,
            error_class="cancelled",
            error_message="cancelled before it started",
            updated_at=now,
        )
        == 1
    )


def execution_cancel(*, execution: TaskExecution, note: str = "") -> str:
    """Cancel one run. Returns "cancelled" (it never starts) or "cancelling" (its worker was
    told and kills it within a poll interval); Conflict if it had already ended. `note`: why
    (kept in the audit log)."""
    before = str(execution.status)
    outcome = _cancel(execution)
    audit_action(
        tenant=execution.tenant,
        verb="execution.cancel",
        object_type="execution",
        object_id=execution.id,
        before={"status": before},
        after={"status": outcome},
        reason=note,
    )
    return outcome


def _cancel(execution: TaskExecution) -> str:
    if execution_cancel_waiting(execution_id=execution.id):
        return ExecutionStatus.CANCELLED.value
    execution.refresh_from_db(fields=["status"])
    if execution.status == ExecutionStatus.RUNNING:
        cancel_request(execution_id=str(execution.id))
        return "cancelling"
    if execution.status in WAITING_STATUSES:  # raced with a claim: try once more
        return _cancel(execution)
    raise Conflict(f"execution already ended ({execution.status})", field="status")
