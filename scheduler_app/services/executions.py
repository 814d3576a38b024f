"""Ending runs: running -> terminal, one statement however many runs a worker finishes
together (a single run is a batch of one), then for each failed attempt its next attempt
or its dead letter. Only the holder of a run's claim may end it (`claims`); a reaper ends
a run whose worker is gone. Each ending is a compare-and-swap, so one caller wins.

What depends on a run's end (its DAG node, counters, notices) is the caller's to settle in
the same transaction (`runs.finish`, `runs.lost`): the core calls up into no app.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache

from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from handler_contract.base import HandlerOutcome as Outcome  # what a handler reported
from scheduler_app import db_rows
from scheduler_app.capabilities import capability_queues
from scheduler_app.choices import RETRYABLE_STATUSES, WAITING_STATUSES, ExecutionStatus
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution
from scheduler_app.ringing.sticky import sticky_hint_set
from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds
from scheduler_app.services.claims import Claim
from scheduler_app.services.flow_admission import flow_waiters_wake
from scheduler_app.services.follow_ups import execution_follow_up_create
from scheduler_app.services.retry_budget import retry_budget_admit

__all__ = [
    "Ended",
    "FinishReport",
    "Outcome",
    "execution_finish",
    "executions_finish",
]

logger = logging.getLogger(__name__)

# How a finish stores its log: one row per execution, the last finish's log wins. Its
# created_at is the finish's time, and never before its run's scheduled_at or created_at
# (a claim takes a run at most CLAIM_CLOCK_TOLERANCE early, and clocks differ): log search
# reads a run's window from the logs written since its start (scheduler_app.selectors.log_search).
LOG_UPSERT = (
    "ON CONFLICT (execution_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, "
    "text = EXCLUDED.text, size_bytes = EXCLUDED.size_bytes, truncated = EXCLUDED.truncated"
)


@dataclass(frozen=True)
class FinishReport:
    """What ending an attempt did. `execution`: the row as it ended (its task loaded), for
    the caller to settle what depends on it (`runs.settle`); None when not accepted."""

    accepted: bool
    next_attempt_id: uuid.UUID | None = None
    dead_lettered: bool = False
    execution: TaskExecution | None = None


@dataclass(frozen=True)
class Ended:
    """A claimed run whose handler ended, with what its finish records. `started_at`: when
    the handler really started, if later than the claim (a run claimed ahead of its time, a
    batch's runs in turn); None keeps the claim's time. `completed_at`: None is the
    finish's time. An empty log is not stored. `progress`: the last progress the handler
    reported, stored in the same statement (None keeps what the row has)."""

    claim: Claim
    outcome: Outcome
    log_text: str = ""
    log_truncated: bool = False
    started_at: datetime | None = None
    completed_at: datetime | None = field(default=None)
    progress: dict | None = None


def executions_finish(ended: Sequence[Ended]) -> list[FinishReport]:
    """running -> terminal for the holder of each claim: the rows, their logs and the rows
    back in one statement; then each failed attempt's retry or dead letter. One report per
    item, in order (`accepted` False where the claim was no longer the owner). Inside the
    caller's transaction this opens none of its own (no savepoint round trips)."""
    if not ended:
        return []
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        rows = _finish_postgres(ended, now=now)
        released = [row.flow_holds for row in rows.values() if row.flow_holds]
        if released:  # flow control: the freed slots' waiters come now (one UPDATE a key)
            flow_waiters_wake(released=released, now=now)
        reports = []
        for item in ended:
            execution = rows.get(item.claim.execution.id)
            if execution is None:
                logger.warning(
                    "rejected finish of execution %s: claim %s is no longer the owner",
                    item.claim.execution.id,
                    item.claim.claim_token,
                )
                reports.append(FinishReport(accepted=False))
                continue
            execution.task = item.claim.task
            execution.tenant = item.claim.execution.tenant
            if item.outcome.status in RETRYABLE_STATUSES:
                reports.append(
                    execution_next_attempt_or_dead_letter(
                        execution=execution,
                        task=item.claim.task,
                        transient=item.outcome.transient,
                        now=now,
                    )
                )
            else:
                reports.append(FinishReport(accepted=True, execution=execution))
        return reports


def execution_finish(
    *,
    outcome: Outcome,
    claim: Claim | None = None,
    execution_id: str | uuid.UUID | None = None,
    claim_token: uuid.UUID | None = None,
    log_text: str = "",
    log_truncated: bool = False,
    started_at: datetime | None = None,
    progress: dict | None = None,
) -> FinishReport:
    """One run's finish (a batch of one). A worker passes the `claim` it holds; another
    caller may name the run and its claim token instead (the run is loaded first)."""
    if claim is None:
        execution = TaskExecution.platform.select_related("task", "tenant").get(id=execution_id)
        claim = Claim(
            execution=execution,
            task=execution.task,
            claim_token=claim_token,
            claimed_at=execution.started_at or timezone.now(),
        )
    return executions_finish(
        [
            Ended(
                claim=claim,
                outcome=outcome,
                log_text=log_text,
                log_truncated=log_truncated,
                started_at=started_at,
                progress=progress,
            )
        ]
    )[0]


@cache
def _finish_sql() -> str:
    executions, logs = TaskExecution._meta.db_table, ExecutionLog._meta.db_table
    return (
        "WITH u AS (SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::text[], "
        "%s::timestamptz[], %s::timestamptz[], %s::jsonb[], %s::integer[], %s::text[], "
        "%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[], %s::jsonb[], "
        "%s::double precision[], %s::bigint[]) "
        "AS u(id, token, status, started_at, completed_at, result, exit_code, error_message, "
        "error_class, log_text, log_size, log_truncated, with_log, progress, cpu_seconds, "
        "peak_memory_bytes)), "
        f"done AS (UPDATE {executions} e SET status = u.status, "
        "started_at = coalesce(u.started_at, e.started_at), completed_at = u.completed_at, "
        "result = u.result, exit_code = u.exit_code, error_message = u.error_message, "
        "error_class = u.error_class, progress = coalesce(u.progress, e.progress), "
        "cpu_seconds = u.cpu_seconds, peak_memory_bytes = u.peak_memory_bytes, "
        "lease_expires_at = NULL, updated_at = %s FROM u "
        "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s RETURNING e.*), "
        f"logged AS (INSERT INTO {logs} "
        "(execution_id, tenant_id, text, size_bytes, truncated, created_at) "
        "SELECT done.id, done.tenant_id, u.log_text, u.log_size, u.log_truncated, "
        "greatest(%s::timestamptz, done.scheduled_at, done.created_at) "
        f"FROM done JOIN u ON u.id = done.id WHERE u.with_log {LOG_UPSERT}) "
        f"SELECT {db_rows.columns(TaskExecution, 'done')} FROM done"
    )


def _finish_postgres(ended: Sequence[Ended], *, now: datetime) -> dict[uuid.UUID, TaskExecution]:
    result_field = TaskExecution._meta.get_field("result")
    progress_field = TaskExecution._meta.get_field("progress")
    outcomes = [item.outcome for item in ended]
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            _finish_sql(),
            [
                [item.claim.execution.id for item in ended],
                [item.claim.claim_token for item in ended],
                [outcome.status for outcome in outcomes],
                [item.started_at for item in ended],
                [item.completed_at or now for item in ended],
                [
                    result_field.get_db_prep_value(outcome.result, connection, prepared=False)
                    for outcome in outcomes
                ],
                [outcome.exit_code for outcome in outcomes],
                [outcome.error_message[:10000] for outcome in outcomes],
                [outcome.error_class[:64] for outcome in outcomes],
                [item.log_text for item in ended],
                [len(item.log_text.encode()) for item in ended],
                [item.log_truncated for item in ended],
                [bool(item.log_text) or item.log_truncated for item in ended],
                [
                    progress_field.get_db_prep_value(item.progress, connection, prepared=False)
                    for item in ended
                ],
                [outcome.cpu_seconds for outcome in outcomes],
                [outcome.peak_memory_bytes for outcome in outcomes],
                now,
                ExecutionStatus.RUNNING.value,
                now,
            ],
            prepare=db_rows.prepare_statements(),
        )
        rows = cursor.fetchall()
    executions = (db_rows.instance(TaskExecution, row) for row in rows)
    return {execution.id: execution for execution in executions}


def _retry_policy(execution: TaskExecution, task: TaskDefinition) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=execution.max_attempts,
        backoff=task.backoff,
        base_delay_seconds=task.base_delay_seconds,
        max_delay_seconds=task.max_delay_seconds,
    )


def execution_next_attempt_or_dead_letter(
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
    TaskExecution.platform.filter(id=execution.id).update(dead_lettered=True, dead_lettered_at=now)
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


def expired_lease_ids(*, now: datetime | None = None, limit: int = 500) -> list[uuid.UUID]:
    """The running executions whose lease has expired (their worker stopped renewing it), by
    PostgreSQL's clock unless `now` is given: never the reaper's own, which may be stepped
    (one 30 s ahead saw every live run's lease expired)."""
    return list(
        TaskExecution.platform.filter(
            status=ExecutionStatus.RUNNING, lease_expires_at__lt=Now() if now is None else now
        ).values_list("id", flat=True)[:limit]
    )


def unrunnable_waiting_ids(
    *, capability: str, now: datetime, wait_seconds: float, limit: int = 500
) -> list[uuid.UUID]:
    """The waiting runs that need `capability` and have waited `wait_seconds` past their
    time (the caller knows no live worker offers it)."""
    cutoff = now - timedelta(seconds=wait_seconds)
    return list(
        TaskExecution.platform.filter(
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
        updated = TaskExecution.platform.filter(
            id=execution_id, status__in=WAITING_STATUSES
        ).update(
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
        execution = TaskExecution.platform.select_related("task").get(id=execution_id)
        return FinishReport(accepted=True, dead_lettered=True, execution=execution)
