"""Execution state transitions, each a conditional UPDATE (compare-and-swap).

Delivery bias: at-least-once from the broker; the claim makes it once per attempt,
and the claim token makes a zombie's late finish harmless.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import redis
from django.db import connection, transaction
from django.utils import timezone

from handler_contract.base import HandlerOutcome as Outcome  # what a handler reported
from scheduler_app import db_rows
from scheduler_app.capabilities import capability_queues
from scheduler_app.choices import (
    RETRYABLE_STATUSES,
    WAITING_STATUSES,
    ExecutionStatus,
    Trigger,
)
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution, Tenant
from scheduler_app.monitoring.counters import record_run_started, record_run_started_into
from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds
from scheduler_app.services.follow_ups import execution_follow_up_create
from scheduler_app.services.retry_budget import retry_budget_admit
from scheduler_app.services.sticky_hints import sticky_hint_set

__all__ = [
    "Claim",
    "FinishReport",
    "Outcome",
    "execution_claim",
    "execution_finish",
]

logger = logging.getLogger(__name__)

# A doorbell may arrive before the row's time: the beat rings a burst up to
# SCHEDULER_FIRE_AHEAD_MAX_SECONDS (8 s) ahead (beat.lead), and clocks differ
# slightly. A run claimed early starts its handler at its time (workers.due).
CLAIM_CLOCK_TOLERANCE = timedelta(seconds=10)


# How a finish stores its log: one row per execution, the last finish's log wins. Its
# created_at is the finish's time, and never before its run's scheduled_at or created_at
# (a claim takes a run at most CLAIM_CLOCK_TOLERANCE early, and clocks differ): log search
# reads a run's window from the logs written since its start (scheduler_app.log_search).
LOG_UPSERT = (
    "ON CONFLICT (execution_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, "
    "text = EXCLUDED.text, size_bytes = EXCLUDED.size_bytes, truncated = EXCLUDED.truncated"
)


@dataclass(frozen=True)
class Claim:
    execution: TaskExecution
    task: TaskDefinition
    claim_token: uuid.UUID
    # When the claim was made: before the run's scheduled time when the beat rang it ahead.
    claimed_at: datetime

    @property
    def ahead_of_time(self) -> bool:
        """Claimed before the run falls due: its handler waits for its time (`workers.due`)."""
        return self.claimed_at < self.execution.scheduled_at


@dataclass(frozen=True)
class FinishReport:
    """What ending an attempt did. `execution`: the row as it ended (its task loaded), for
    the caller to settle what depends on it (`runs.settle`); None when not accepted."""

    accepted: bool
    next_attempt_id: uuid.UUID | None = None
    dead_lettered: bool = False
    execution: TaskExecution | None = None


def execution_claim(
    *,
    execution_id: str | uuid.UUID,
    worker_id: str,
    lease_seconds: float,
    metrics_pipe: redis.client.Pipeline | None = None,
) -> Claim | None:
    """pending|queued -> running for exactly one caller; everyone else gets None.

    One statement claims the row and returns it with its task and tenant (the
    quota check right after the claim needs the tenant). The schedule-to-start histogram is
    counted at once, or queued on `metrics_pipe` (a worker sends it with its other writes)."""
    now = timezone.now()
    token = uuid.uuid4()
    lease_expires_at = now + timedelta(seconds=lease_seconds)
    claim = _claim_postgres(
        execution_id=execution_id,
        worker_id=worker_id,
        token=token,
        now=now,
        lease_expires_at=lease_expires_at,
    )
    if claim is None:
        return None
    claim_lag_record(claim, metrics_pipe)
    return claim


def claim_lag_record(claim: Claim, metrics_pipe=None) -> None:
    """The schedule-to-start histogram's observation of a claim, counted at once or queued
    on `metrics_pipe`. A run claimed ahead of its time is observed when its handler starts
    instead (`workers.run_ledger.RunLedger.end_into`)."""
    if claim.ahead_of_time or claim.execution.trigger == Trigger.BACKFILL:
        return  # a backfilled fire's age is not the scheduler's lag
    lag = (claim.claimed_at - claim.execution.scheduled_at).total_seconds()
    if metrics_pipe is None:
        record_run_started(tier=claim.execution.queue, lag_seconds=lag)
    else:
        record_run_started_into(metrics_pipe, tier=claim.execution.queue, lag_seconds=lag)


@cache
def _claim_sql() -> str:
    executions = TaskExecution._meta.db_table
    return (
        f"WITH claimed AS (UPDATE {executions} SET status = %s, worker_id = %s, "
        "claim_token = %s, started_at = %s, lease_expires_at = %s, updated_at = %s "
        "WHERE id = %s AND status IN (%s, %s) AND scheduled_at <= %s RETURNING *) "
        f"SELECT {db_rows.columns(TaskExecution, 'claimed')}, "
        f"{db_rows.columns(TaskDefinition, 't')}, {db_rows.columns(Tenant, 'n')} "
        f"FROM claimed JOIN {TaskDefinition._meta.db_table} t ON t.id = claimed.task_id "
        f"JOIN {Tenant._meta.db_table} n ON n.id = claimed.tenant_id"
    )


def _claim_postgres(
    *,
    execution_id: str | uuid.UUID,
    worker_id: str,
    token: uuid.UUID,
    now: datetime,
    lease_expires_at: datetime,
) -> Claim | None:
    row = db_rows.execute_prepared(
        _claim_sql(),
        [
            ExecutionStatus.RUNNING.value,
            worker_id,
            token,
            now,
            lease_expires_at,
            now,
            uuid.UUID(str(execution_id)),
            *(status.value for status in WAITING_STATUSES),
            now + CLAIM_CLOCK_TOLERANCE,
        ],
    )
    if row is None:
        return None
    first = db_rows.width(TaskExecution)
    second = first + db_rows.width(TaskDefinition)
    execution = db_rows.instance(TaskExecution, row[:first])
    task = db_rows.instance(TaskDefinition, row[first:second])
    execution.task = task
    execution.tenant = task.tenant = db_rows.instance(Tenant, row[second:])
    return Claim(execution=execution, task=task, claim_token=token, claimed_at=now)


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
        return FinishReport(accepted=True, next_attempt_id=next_attempt.id, execution=execution)
    TaskExecution.objects.filter(id=execution.id).update(dead_lettered=True, dead_lettered_at=now)
    return FinishReport(accepted=True, dead_lettered=True, execution=execution)


def _within_retry_budget(due_at: datetime, *, now: datetime) -> datetime:
    try:
        return retry_budget_admit(due_at=due_at, now=now)
    except Exception:  # Redis down: retry on the policy's time rather than lose the retry
        logger.exception("retry budget unavailable; scheduling the retry unbudgeted")
        return due_at


def _prefer_previous_worker(next_attempt: TaskExecution, *, worker_id: str, now: datetime) -> None:
    """Sticky routing hint: the worker of this attempt is asked to take the next one."""
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
    task: TaskDefinition | None = None,
    started_at: datetime | None = None,
) -> FinishReport:
    """running -> terminal, only for the holder of the claim; schedules retry or dead-letters.

    `task`: the definition the claim loaded (a worker passes it; saves loading it again).
    `started_at`: when the handler really started, if later than the claim (a batch's runs
    start in turn after one claim); without it the claim's time stays.
    An empty log is not stored. The finish, the row it returns and the log are one statement.

    What depends on the run's end (its DAG node, counters, notices) is the caller's to
    settle in the same transaction: `runs.finish.run_finish` does both. Inside the caller's
    transaction this opens none of its own (no savepoint round trips)."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        execution = _finish_postgres(
            execution_id=execution_id,
            claim_token=claim_token,
            outcome=outcome,
            log_text=log_text,
            log_truncated=log_truncated,
            now=now,
            started_at=started_at,
        )
        if execution is None:
            logger.warning(
                "rejected finish of execution %s: claim %s is no longer the owner",
                execution_id,
                claim_token,
            )
            return FinishReport(accepted=False)
        if task is None or task.id != execution.task_id:
            task = TaskDefinition.objects.get(id=execution.task_id)
        execution.task = task
        if outcome.status in RETRYABLE_STATUSES:
            return _schedule_next_attempt_or_dead_letter(
                execution=execution, task=task, transient=outcome.transient, now=now
            )
        return FinishReport(accepted=True, execution=execution)


def _finish_values(
    outcome: Outcome, now: datetime, started_at: datetime | None = None
) -> dict[str, object]:
    values: dict[str, object] = {} if started_at is None else {"started_at": started_at}
    return values | {
        "status": outcome.status,
        "completed_at": now,
        "result": outcome.result,
        "exit_code": outcome.exit_code,
        "error_message": outcome.error_message[:10000],
        "error_class": outcome.error_class[:64],
        "lease_expires_at": None,
        "updated_at": now,
    }


@cache
def _finish_sql(*, with_log: bool) -> str:
    executions = TaskExecution._meta.db_table
    sql = (
        f"WITH done AS (UPDATE {executions} SET status = %s, "
        "started_at = coalesce(%s::timestamptz, started_at), completed_at = %s, result = %s, "
        "exit_code = %s, error_message = %s, error_class = %s, lease_expires_at = NULL, "
        "updated_at = %s WHERE id = %s AND claim_token = %s AND status = %s RETURNING *)"
    )
    if with_log:
        sql += (
            f", logged AS (INSERT INTO {ExecutionLog._meta.db_table} "
            "(execution_id, tenant_id, text, size_bytes, truncated, created_at) "
            "SELECT id, tenant_id, %s::text, %s::bigint, %s::boolean, "
            "greatest(%s::timestamptz, scheduled_at, created_at) FROM done "
            f"{LOG_UPSERT})"
        )
    return sql + f" SELECT {db_rows.columns(TaskExecution, 'done')} FROM done"


def _finish_postgres(
    *,
    execution_id: str | uuid.UUID,
    claim_token: uuid.UUID,
    outcome: Outcome,
    log_text: str,
    log_truncated: bool,
    now: datetime,
    started_at: datetime | None = None,
) -> TaskExecution | None:
    values = _finish_values(outcome, now)
    result_field = TaskExecution._meta.get_field("result")
    params: list[object] = [
        values["status"],
        started_at,
        now,
        result_field.get_db_prep_value(values["result"], connection, prepared=False),
        values["exit_code"],
        values["error_message"],
        values["error_class"],
        now,
        uuid.UUID(str(execution_id)),
        claim_token,
        ExecutionStatus.RUNNING.value,
    ]
    with_log = bool(log_text) or log_truncated
    if with_log:
        params += [log_text, len(log_text.encode()), log_truncated, now]
    row = db_rows.execute_prepared(_finish_sql(with_log=with_log), params)
    return None if row is None else db_rows.instance(TaskExecution, row)


def execution_fail_lost(*, execution_id: uuid.UUID, now: datetime | None = None) -> FinishReport:
    """A running execution whose lease expired: a failed attempt (`worker_lost`), retried.

    Idempotent: the conditional UPDATE lets exactly one reaper win, so the next
    attempt is scheduled once however many reapers see the same expired lease.
    """
    now = now or timezone.now()
    with transaction.atomic(savepoint=False):
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
        return _schedule_next_attempt_or_dead_letter(
            execution=execution, task=execution.task, transient=True, now=now
        )


def expired_lease_ids(*, now: datetime, limit: int = 500) -> list[uuid.UUID]:
    """The running executions whose lease has expired (their worker stopped renewing it)."""
    return list(
        TaskExecution.objects.filter(
            status=ExecutionStatus.RUNNING, lease_expires_at__lt=now
        ).values_list("id", flat=True)[:limit]
    )


def unrunnable_waiting_ids(
    *, capability: str, now: datetime, wait_seconds: float, limit: int = 500
) -> list[uuid.UUID]:
    """The waiting runs that need `capability` and have waited `wait_seconds` past their
    time (the caller knows no live worker offers it)."""
    cutoff = now - timedelta(seconds=wait_seconds)
    return list(
        TaskExecution.objects.filter(
            status__in=WAITING_STATUSES,
            queue__in=capability_queues(capability),
            scheduled_at__lt=cutoff,
        ).values_list("id", flat=True)[:limit]
    )


def execution_unrunnable_fail(
    *, execution_id: uuid.UUID, capability: str, now: datetime
) -> FinishReport:
    """waiting -> failed (`no_capable_worker`, naming the capability), dead-lettered: a
    retry from the dead-letter queue once such a worker runs. The caller settles it."""
    with transaction.atomic(savepoint=False):
        updated = TaskExecution.objects.filter(id=execution_id, status__in=WAITING_STATUSES).update(
            status=ExecutionStatus.FAILED,
            completed_at=now,
            error_class="no_capable_worker",
            error_message=(
                f"no live worker offers {capability!r}: the run waited for one and gave up "
                "(SCHEDULER_CAPABILITY_WAIT_SECONDS)"
            ),
            dead_lettered=True,
            dead_lettered_at=now,
            updated_at=now,
        )
        if updated != 1:
            return FinishReport(accepted=False)
        execution = TaskExecution.objects.select_related("task").get(id=execution_id)
        return FinishReport(accepted=True, dead_lettered=True, execution=execution)
