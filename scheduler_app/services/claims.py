"""Claiming runs: pending|queued -> running, one statement however many runs a doorbell
brings (a single doorbell is a batch of one). A claim is a compare-and-swap, so of two
deliveries each row goes to one of them; each row gets its own claim token, and only its
holder may finish it, give it back or renew its lease.

Delivery bias: at-least-once from the broker; the claim makes it once per attempt, and the
claim token makes a zombie's late finish harmless (`scheduler_app.services.executions`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.db import OperationalError
from django.utils import timezone

from scheduler_app import db_rows
from scheduler_app.choices import WAITING_STATUSES, ExecutionStatus, Trigger
from scheduler_app.db_retry import database_retry
from scheduler_app.models import RunCheckpoint, TaskDefinition, TaskExecution, Tenant
from scheduler_app.monitoring.counters import record_run_started, record_run_started_into

logger = logging.getLogger(__name__)

# A doorbell may arrive before the row's time: the beat rings a burst up to
# SCHEDULER_FIRE_AHEAD_MAX_SECONDS (8 s) ahead (beat.lead), and clocks differ
# slightly. A run claimed early starts its handler at its time (workers.due).
CLAIM_CLOCK_TOLERANCE = timedelta(seconds=10)

# Two deliveries of one batch lock the same rows; PostgreSQL may visit them in a different
# order and break the tie with a deadlock error. The loser claims again (and gets nothing).
CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Claim:
    execution: TaskExecution
    task: TaskDefinition
    claim_token: uuid.UUID
    # When the claim was made: before the run's scheduled time when the beat rang it ahead.
    claimed_at: datetime
    # Whether the run (its chain) has a checkpoint, read by the claim statement itself, so a
    # run without one (nearly all) costs no query for it (`workers.checkpoints`). None: not
    # known (a claim made another way), look it up.
    has_checkpoint: bool | None = None

    @property
    def ahead_of_time(self) -> bool:
        """Claimed before the run falls due: its handler waits for its time (`workers.due`)."""
        return self.claimed_at < self.execution.scheduled_at


def executions_claim(
    *,
    execution_ids: Sequence[str | uuid.UUID],
    worker_id: str,
    lease_seconds: float,
    metrics_pipe=None,
) -> list[Claim]:
    """pending|queued -> running for the rows no one else holds, in the order of
    `execution_ids`, each returned with its task and tenant (the quota check right after
    the claim needs the tenant). The schedule-to-start of each is queued on `metrics_pipe`
    (a worker sends it with its other writes), or counted at once without one."""
    ids = [uuid.UUID(str(execution_id)) for execution_id in dict.fromkeys(execution_ids)]
    for attempt in range(1, CLAIM_ATTEMPTS + 1):
        try:
            # A primary lost mid-claim: the claim again on the promoted one. A claim that had
            # committed finds its rows running and claims none of them: they are not run twice
            # (their lease expires and the reaper hands them on).
            claims = database_retry(
                lambda: _claim_postgres(ids, worker_id=worker_id, lease_seconds=lease_seconds),
                what="claim",
            )
            break
        except OperationalError:
            if attempt == CLAIM_ATTEMPTS:
                raise
            logger.warning("claim lost a lock race (attempt %s); claiming again", attempt)
    for claim in claims:
        claim_lag_record(claim, metrics_pipe)
    return claims


def execution_claim(
    *,
    execution_id: str | uuid.UUID,
    worker_id: str,
    lease_seconds: float,
    metrics_pipe=None,
) -> Claim | None:
    """One run's claim (a batch of one): the claim, or None when someone else holds it."""
    claims = executions_claim(
        execution_ids=[execution_id],
        worker_id=worker_id,
        lease_seconds=lease_seconds,
        metrics_pipe=metrics_pipe,
    )
    return claims[0] if claims else None


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
        f"WITH claimed AS (UPDATE {executions} e SET status = %s, worker_id = %s, "
        # A run claimed holds no flow-control slot until its admission gives it one
        # (`services.flow_admission`); a row given back or deferred may still carry one.
        # Except the slots a lost run's requeue kept for it (`services.losses`): queued
        # with a lease not yet ended, they stay held through the claim, so no other
        # admission takes them before this run's own (which does not count them).
        # The lease counts from the run's time when it is claimed ahead of it: its process
        # holds it through the wait for it (`workers.due`; a batch's wait renews nothing),
        # and a lease that ran out meanwhile would hand a run still held to another process.
        "claim_token = u.token, started_at = %s, "
        "lease_expires_at = GREATEST(e.scheduled_at, %s) + %s, updated_at = %s, "
        "flow_holds = CASE WHEN e.status = %s AND e.lease_expires_at > %s "
        "THEN e.flow_holds END "
        "FROM unnest(%s::uuid[], %s::uuid[]) AS u(id, token) "
        "WHERE e.id = u.id AND e.status IN (%s, %s) AND e.scheduled_at <= %s RETURNING e.*) "
        f"SELECT {db_rows.columns(TaskExecution, 'claimed')}, "
        f"{db_rows.columns(TaskDefinition, 't')}, {db_rows.columns(Tenant, 'n')}, "
        f"EXISTS (SELECT 1 FROM {RunCheckpoint._meta.db_table} c "
        "WHERE c.chain_id = coalesce(claimed.root_execution_id, claimed.id)) "
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
                now,
                timedelta(seconds=lease_seconds),
                now,
                ExecutionStatus.QUEUED.value,
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
    third = second + db_rows.width(Tenant)
    tenants: dict[uuid.UUID, Tenant] = {}
    by_id: dict[uuid.UUID, Claim] = {}
    for row in rows:
        execution = db_rows.instance(TaskExecution, row[:first])
        task = db_rows.instance(TaskDefinition, row[first:second])
        tenant = tenants.get(task.tenant_id)
        if tenant is None:
            tenant = tenants[task.tenant_id] = db_rows.instance(Tenant, row[second:third])
        execution.task = task
        execution.tenant = task.tenant = tenant
        by_id[execution.id] = Claim(
            execution=execution,
            task=task,
            claim_token=execution.claim_token,
            claimed_at=execution.started_at,
            has_checkpoint=bool(row[third]),
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


def execution_renew_lease(
    *, execution_id: str | uuid.UUID, claim_token: uuid.UUID, lease_seconds: float
) -> bool:
    """Extend the lease; False means the claim is no longer ours (taken over or finished)."""
    now = timezone.now()
    return (
        TaskExecution.platform.filter(
            id=execution_id, claim_token=claim_token, status=ExecutionStatus.RUNNING
        ).update(lease_expires_at=now + timedelta(seconds=lease_seconds))
        == 1
    )
