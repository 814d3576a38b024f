"""Execution state transitions, each a conditional UPDATE (compare-and-swap).

Delivery bias: at-least-once from the broker; the claim makes it once per attempt,
and the claim token makes a zombie's late finish harmless.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import (
    RETRYABLE_STATUSES,
    WAITING_STATUSES,
    ExecutionStatus,
    Trigger,
)
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution
from scheduler_app.monitoring.counters import record_run_started
from scheduler_app.monitoring.hooks import run_finished_on_commit
from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds
from workers.handlers.base import HandlerOutcome as Outcome  # what a handler reported

__all__ = ["Claim", "FinishReport", "Outcome", "execution_claim", "execution_finish"]

logger = logging.getLogger(__name__)

# A doorbell may arrive a little before the row's time because clocks differ slightly.
CLAIM_CLOCK_TOLERANCE = timedelta(seconds=2)


@dataclass(frozen=True)
class Claim:
    execution: TaskExecution
    task: TaskDefinition
    claim_token: uuid.UUID


@dataclass(frozen=True)
class FinishReport:
    accepted: bool
    next_attempt_id: uuid.UUID | None = None
    dead_lettered: bool = False


def execution_claim(
    *, execution_id: str | uuid.UUID, worker_id: str, lease_seconds: float
) -> Claim | None:
    """pending|queued -> running for exactly one caller; everyone else gets None."""
    now = timezone.now()
    token = uuid.uuid4()
    claimed = TaskExecution.objects.filter(
        id=execution_id,
        status__in=WAITING_STATUSES,
        scheduled_at__lte=now + CLAIM_CLOCK_TOLERANCE,
    ).update(
        status=ExecutionStatus.RUNNING,
        worker_id=worker_id,
        claim_token=token,
        started_at=now,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        updated_at=now,
    )
    if claimed != 1:
        return None
    # The tenant comes along: the quota check right after the claim needs it.
    execution = TaskExecution.objects.select_related("task", "tenant").get(id=execution_id)
    record_run_started(
        tier=execution.queue, lag_seconds=(now - execution.scheduled_at).total_seconds()
    )
    return Claim(execution=execution, task=execution.task, claim_token=token)


def execution_renew_lease(
    *, execution_id: str | uuid.UUID, claim_token: uuid.UUID, lease_seconds: float
) -> bool:
    """Extend the lease; False means the claim is no longer ours (taken over or finished)."""
    now = timezone.now()
    return (
        TaskExecution.objects.filter(
            id=execution_id, claim_token=claim_token, status=ExecutionStatus.RUNNING
        ).update(lease_expires_at=now + timedelta(seconds=lease_seconds))
        == 1
    )


def execution_follow_up_create(
    *,
    previous: TaskExecution,
    status: str,
    scheduled_at: datetime,
    attempt: int,
    max_attempts: int,
    priority: int | None = None,
) -> TaskExecution:
    """A new attempt that follows `previous` (a retry, or a manual retry of a dead letter)."""
    return TaskExecution.objects.create(
        id=uuid.uuid4(),
        tenant_id=previous.tenant_id,
        task_id=previous.task_id,
        status=status,
        trigger=Trigger.RETRY,
        priority=previous.priority if priority is None else priority,
        queue=previous.queue,
        scheduled_at=scheduled_at,
        queued_at=scheduled_at if status == ExecutionStatus.QUEUED else None,
        attempt=attempt,
        max_attempts=max_attempts,
        root_execution_id=previous.root_execution_id or previous.id,
        retry_of_id=previous.id,
        parameters=previous.parameters,
    )


def _retry_policy(execution: TaskExecution, task: TaskDefinition) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=execution.max_attempts,
        backoff=task.backoff,
        base_delay_seconds=task.base_delay_seconds,
        max_delay_seconds=task.max_delay_seconds,
    )


def _schedule_next_attempt_or_dead_letter(
    *, execution: TaskExecution, task: TaskDefinition, transient: bool, now: datetime
) -> FinishReport:
    """Called inside the transaction that ended a failed attempt (exactly once per attempt)."""
    if transient and execution.attempt < execution.max_attempts:
        delay = retry_delay_seconds(
            _retry_policy(execution, task), failed_attempt=execution.attempt
        )
        next_attempt = execution_follow_up_create(
            previous=execution,
            status=ExecutionStatus.PENDING,
            scheduled_at=_within_retry_budget(now + timedelta(seconds=delay), now=now),
            attempt=execution.attempt + 1,
            max_attempts=execution.max_attempts,
        )
        _prefer_previous_worker(next_attempt, worker_id=execution.worker_id, now=now)
        return FinishReport(accepted=True, next_attempt_id=next_attempt.id)
    TaskExecution.objects.filter(id=execution.id).update(dead_lettered=True, dead_lettered_at=now)
    return FinishReport(accepted=True, dead_lettered=True)


def _dag_execution_settled(*, execution: TaskExecution, report: FinishReport) -> None:
    """DAG nodes move on in the same transaction that ends their execution (no-op otherwise)."""
    from dags.services.hooks import dag_execution_settled

    dag_execution_settled(execution=execution, next_attempt_id=report.next_attempt_id)


def _within_retry_budget(due_at: datetime, *, now: datetime) -> datetime:
    from scheduler_app.services.retry_budget import retry_budget_admit

    try:
        return retry_budget_admit(due_at=due_at, now=now)
    except Exception:  # Redis down: retry on the policy's time rather than lose the retry
        logger.exception("retry budget unavailable; scheduling the retry unbudgeted")
        return due_at


def _prefer_previous_worker(next_attempt: TaskExecution, *, worker_id: str, now: datetime) -> None:
    """Sticky routing hint: the worker of this attempt is asked to take the next one."""
    from workers.routing import sticky_hint_set

    ttl = (next_attempt.scheduled_at - now).total_seconds()

    def hint() -> None:
        try:
            sticky_hint_set(execution_id=str(next_attempt.id), worker_id=worker_id, ttl_seconds=ttl)
        except Exception:
            logger.exception("could not record the sticky hint of %s", next_attempt.id)

    transaction.on_commit(hint)


def execution_finish(
    *,
    execution_id: str | uuid.UUID,
    claim_token: uuid.UUID,
    outcome: Outcome,
    log_text: str = "",
    log_truncated: bool = False,
) -> FinishReport:
    """running -> terminal, only for the holder of the claim; schedules retry or dead-letters."""
    now = timezone.now()
    with transaction.atomic():
        updated = TaskExecution.objects.filter(
            id=execution_id, claim_token=claim_token, status=ExecutionStatus.RUNNING
        ).update(
            status=outcome.status,
            completed_at=now,
            result=outcome.result,
            exit_code=outcome.exit_code,
            error_message=outcome.error_message[:10000],
            error_class=outcome.error_class[:64],
            lease_expires_at=None,
            updated_at=now,
        )
        if updated != 1:
            logger.warning(
                "rejected finish of execution %s: claim %s is no longer the owner",
                execution_id,
                claim_token,
            )
            return FinishReport(accepted=False)
        execution = TaskExecution.objects.select_related("task").get(id=execution_id)
        ExecutionLog.objects.update_or_create(
            execution_id=execution.id,
            defaults={
                "tenant_id": execution.tenant_id,
                "text": log_text,
                "size_bytes": len(log_text.encode()),
                "truncated": log_truncated,
            },
        )
        report = FinishReport(accepted=True)
        if outcome.status in RETRYABLE_STATUSES:
            report = _schedule_next_attempt_or_dead_letter(
                execution=execution, task=execution.task, transient=outcome.transient, now=now
            )
        run_finished_on_commit(execution=execution, dead_lettered=report.dead_lettered)
        _dag_execution_settled(execution=execution, report=report)
        return report


def execution_fail_lost(*, execution_id: uuid.UUID, now: datetime | None = None) -> FinishReport:
    """A running execution whose lease expired: a failed attempt (`worker_lost`), retried.

    Idempotent: the conditional UPDATE lets exactly one reaper win, so the next
    attempt is scheduled once however many reapers see the same expired lease.
    """
    now = now or timezone.now()
    with transaction.atomic():
        updated = TaskExecution.objects.filter(
            id=execution_id, status=ExecutionStatus.RUNNING, lease_expires_at__lt=now
        ).update(
            status=ExecutionStatus.FAILED,
            completed_at=now,
            error_class="worker_lost",
            error_message="the worker running this attempt stopped renewing its lease",
            claim_token=None,
            lease_expires_at=None,
            updated_at=now,
        )
        if updated != 1:
            return FinishReport(accepted=False)
        execution = TaskExecution.objects.select_related("task").get(id=execution_id)
        report = _schedule_next_attempt_or_dead_letter(
            execution=execution, task=execution.task, transient=True, now=now
        )
        run_finished_on_commit(execution=execution, dead_lettered=report.dead_lettered)
        _dag_execution_settled(execution=execution, report=report)
        return report


def expired_leases_reap(*, limit: int = 500) -> int:
    """Fail every running execution whose lease has expired. Returns how many this call won."""
    now = timezone.now()
    expired = list(
        TaskExecution.objects.filter(
            status=ExecutionStatus.RUNNING, lease_expires_at__lt=now
        ).values_list("id", flat=True)[:limit]
    )
    return sum(
        1 for execution_id in expired if execution_fail_lost(execution_id=execution_id).accepted
    )
