"""The state transitions of a batch doorbell (see `workers.batch_runner`), one statement each
however many executions the batch holds: claim them, give back the ones the
worker will not start, finish the ones that succeeded.

Each keeps the guarantees of its one-row twin in `executions`: a claim is a compare-and-swap
from pending|queued (so of two deliveries of a batch each row goes to one of them), every
row gets its own claim token, and a finish or a give-back applies only to the holder of the
row's claim. Failures, retries and DAG nodes are finished one by one by `execution_finish`
(retry scheduling, dead letters and DAG hooks live there); a batch only shortcuts plain
successes, which is what a burst of scheduled runs mostly ends as.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import redis
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from scheduler_app import db_rows
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution, Tenant
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.services.executions import (
    CLAIM_CLOCK_TOLERANCE,
    LOG_UPSERT,
    Claim,
    Outcome,
    claim_lag_record,
)

logger = logging.getLogger(__name__)

# Two deliveries of one batch lock the same rows; PostgreSQL may visit them in a different
# order and break the tie with a deadlock error. The loser claims again (and gets nothing).
CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Succeeded:
    """A claimed execution whose handler succeeded, with what its finish records."""

    claim: Claim
    outcome: Outcome
    started_at: datetime
    completed_at: datetime
    log_text: str = ""
    log_truncated: bool = False


def executions_claim(
    *,
    execution_ids: Sequence[str],
    worker_id: str,
    lease_seconds: float,
    metrics_pipe: redis.client.Pipeline | CoalescedWrites,
) -> list[Claim]:
    """pending|queued -> running for the rows no one else holds, in the order of
    `execution_ids`; the schedule-to-start of each is queued on `metrics_pipe`."""
    ids = [uuid.UUID(str(execution_id)) for execution_id in dict.fromkeys(execution_ids)]
    for attempt in range(1, CLAIM_ATTEMPTS + 1):
        try:
            claims = _claim_postgres(ids, worker_id=worker_id, lease_seconds=lease_seconds)
            break
        except OperationalError:
            if attempt == CLAIM_ATTEMPTS:
                raise
            logger.warning("batch claim lost a lock race (attempt %s); claiming again", attempt)
    for claim in claims:
        claim_lag_record(claim, metrics_pipe)
    return claims


@cache
def _claim_sql() -> str:
    executions = TaskExecution._meta.db_table
    return (
        f"WITH claimed AS (UPDATE {executions} e SET status = %s, worker_id = %s, "
        "claim_token = u.token, started_at = %s, lease_expires_at = %s, updated_at = %s "
        "FROM unnest(%s::uuid[], %s::uuid[]) AS u(id, token) "
        "WHERE e.id = u.id AND e.status IN (%s, %s) AND e.scheduled_at <= %s RETURNING e.*) "
        f"SELECT {db_rows.columns(TaskExecution, 'claimed')}, "
        f"{db_rows.columns(TaskDefinition, 't')}, {db_rows.columns(Tenant, 'n')} "
        f"FROM claimed JOIN {TaskDefinition._meta.db_table} t ON t.id = claimed.task_id "
        f"JOIN {Tenant._meta.db_table} n ON n.id = claimed.tenant_id"
    )


def _claim_postgres(ids: list[uuid.UUID], *, worker_id: str, lease_seconds: float) -> list[Claim]:
    now = timezone.now()
    tokens = [uuid.uuid4() for _ in ids]
    with db_rows.server_bound_cursor() as cursor:  # autocommit: one statement, one commit
        cursor.execute(
            _claim_sql(),
            [
                ExecutionStatus.RUNNING.value,
                worker_id,
                now,
                now + timedelta(seconds=lease_seconds),
                now,
                ids,
                tokens,
                *(status.value for status in WAITING_STATUSES),
                now + CLAIM_CLOCK_TOLERANCE,
            ],
            prepare=db_rows.prepare_statements(),
        )
        rows = cursor.fetchall()
    first = db_rows.width(TaskExecution)
    second = first + db_rows.width(TaskDefinition)
    tenants: dict[uuid.UUID, Tenant] = {}
    by_id: dict[uuid.UUID, Claim] = {}
    for row in rows:
        execution = db_rows.instance(TaskExecution, row[:first])
        task = db_rows.instance(TaskDefinition, row[first:second])
        tenant = tenants.get(task.tenant_id)
        if tenant is None:
            tenant = tenants[task.tenant_id] = db_rows.instance(Tenant, row[second:])
        execution.task = task
        execution.tenant = task.tenant = tenant
        by_id[execution.id] = Claim(
            execution=execution,
            task=task,
            claim_token=execution.claim_token,
            claimed_at=execution.started_at,
        )
    return [by_id[i] for i in ids if i in by_id]


def executions_give_back(claims: Sequence[Claim]) -> list[TaskExecution]:
    """running (claimed, handler not started) -> queued again, for the holder of each claim;
    returns the rows given back, to ring their doorbells again."""
    if not claims:
        return []
    now = timezone.now()
    ids = [claim.execution.id for claim in claims]
    tokens = [claim.claim_token for claim in claims]
    executions = TaskExecution._meta.db_table
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            f"UPDATE {executions} e SET status = %s, queued_at = %s, started_at = NULL, "
            "worker_id = '', claim_token = NULL, lease_expires_at = NULL, updated_at = %s "
            "FROM unnest(%s::uuid[], %s::uuid[]) AS u(id, token) "
            "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s RETURNING e.id",
            [ExecutionStatus.QUEUED.value, now, now, ids, tokens, ExecutionStatus.RUNNING.value],
            prepare=db_rows.prepare_statements(),
        )
        given_ids = {row[0] for row in cursor.fetchall()}
    return [claim.execution for claim in claims if claim.execution.id in given_ids]


def executions_finish_succeeded(succeeded: Sequence[Succeeded]) -> list[Succeeded]:
    """running -> success with each run's result, times and log, for the holder of each
    claim, in one transaction; returns the ones accepted, their rows updated in memory.
    Their counters and notices are the caller's (`runs.finish.runs_finish_succeeded`)."""
    if not succeeded:
        return []
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        accepted = _finish_postgres(succeeded, now=now)
        logged = [item for item in accepted if item.log_text or item.log_truncated]
        if logged:
            _logs_write(logged, now=now)
        for item in accepted:
            execution = item.claim.execution
            execution.status = ExecutionStatus.SUCCESS
            execution.started_at, execution.completed_at = item.started_at, item.completed_at
    return accepted


@cache
def _finish_sql() -> str:
    executions = TaskExecution._meta.db_table
    return (
        f"UPDATE {executions} e SET status = %s, started_at = u.started_at, "
        "completed_at = u.completed_at, result = u.result, exit_code = u.exit_code, "
        "error_message = u.error_message, error_class = '', lease_expires_at = NULL, "
        "updated_at = %s FROM unnest(%s::uuid[], %s::uuid[], %s::timestamptz[], "
        "%s::timestamptz[], %s::jsonb[], %s::integer[], %s::text[]) "
        "AS u(id, token, started_at, completed_at, result, exit_code, error_message) "
        "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s RETURNING e.id"
    )


def _finish_postgres(succeeded: Sequence[Succeeded], *, now: datetime) -> list[Succeeded]:
    result_field = TaskExecution._meta.get_field("result")
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            _finish_sql(),
            [
                ExecutionStatus.SUCCESS.value,
                now,
                [item.claim.execution.id for item in succeeded],
                [item.claim.claim_token for item in succeeded],
                [item.started_at for item in succeeded],
                [item.completed_at for item in succeeded],
                [
                    result_field.get_db_prep_value(item.outcome.result, connection, prepared=False)
                    for item in succeeded
                ],
                [item.outcome.exit_code for item in succeeded],
                [item.outcome.error_message[:10000] for item in succeeded],
                ExecutionStatus.RUNNING.value,
            ],
            prepare=db_rows.prepare_statements(),
        )
        done = {row[0] for row in cursor.fetchall()}
    rejected = [item for item in succeeded if item.claim.execution.id not in done]
    for item in rejected:
        logger.warning(
            "rejected finish of execution %s: claim %s is no longer the owner",
            item.claim.execution.id,
            item.claim.claim_token,
        )
    return [item for item in succeeded if item.claim.execution.id in done]


def _logs_write(logged: Sequence[Succeeded], *, now: datetime) -> None:
    logs = ExecutionLog._meta.db_table
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {logs} (execution_id, tenant_id, text, size_bytes, truncated, "
            "created_at) SELECT u.id, u.tenant_id, u.text, u.size, u.truncated, "
            "greatest(%s, u.scheduled_at, u.created_at) "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::bigint[], %s::boolean[], "
            "%s::timestamptz[], %s::timestamptz[]) "
            f"AS u(id, tenant_id, text, size, truncated, scheduled_at, created_at) {LOG_UPSERT}",
            [
                now,
                [item.claim.execution.id for item in logged],
                [item.claim.execution.tenant_id for item in logged],
                [item.log_text for item in logged],
                [len(item.log_text.encode()) for item in logged],
                [item.log_truncated for item in logged],
                [item.claim.execution.scheduled_at for item in logged],
                [item.claim.execution.created_at for item in logged],
            ],
        )
