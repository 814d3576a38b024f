"""Tenant quotas, enforced when a worker claims a run (soft: over quota defers, never fails).

- concurrent runs: counted in PostgreSQL (running rows of the tenant, this claim included);
- runs per hour and compute minutes per month: Redis counters per clock window, bumped
  at claim and at finish. Losing Redis resets them, which only ever errs towards running.

A run over quota goes back to `pending` with a later `scheduled_at` (when room is expected);
the leader's promote loop rings it again then. The tenant's admins are told once per
window through a `quota.exceeded` audit entry (channels come with alerting).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.utils import timezone

from scheduler_app import db_rows
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.audit import audit_record

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Usage:
    concurrent_runs: int
    runs_this_hour: int
    compute_minutes_this_month: float


@dataclass(frozen=True)
class Deferral:
    quota: str
    until: datetime
    usage: float
    limit: int


def _hour_window(now: datetime) -> str:
    return now.strftime("%Y%m%d%H")


def _month_window(now: datetime) -> str:
    return now.strftime("%Y%m")


def _next_hour(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def _next_month(now: datetime) -> datetime:
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first + timedelta(days=32)).replace(day=1)


def _runs_key(tenant_id: object, now: datetime) -> str:
    return redis_key(f"usage:{tenant_id}:runs:{_hour_window(now)}")


def _seconds_key(tenant_id: object, now: datetime) -> str:
    return redis_key(f"usage:{tenant_id}:seconds:{_month_window(now)}")


def usage_counter_keys(*, tenant_id: object, now: datetime) -> tuple[str, str]:
    """The Redis counters of a tenant's runs this hour and compute seconds this month."""
    return _runs_key(tenant_id, now), _seconds_key(tenant_id, now)


def tenant_usage(*, tenant: Tenant, now: datetime | None = None) -> Usage:
    now = now or timezone.now()
    running = TaskExecution.objects.filter(tenant=tenant, status=ExecutionStatus.RUNNING).count()
    try:
        runs, seconds = get_redis().mget(_runs_key(tenant.id, now), _seconds_key(tenant.id, now))
    except redis.RedisError:
        runs, seconds = None, None
    return Usage(
        concurrent_runs=running,
        runs_this_hour=int(runs or 0),
        compute_minutes_this_month=round(float(seconds or 0) / 60, 3),
    )


# A running run claimed this recently is most likely still waiting in its worker's batch
# (a batch claims its runs at once and runs a few at a time, `workers.batch_lanes`) or
# about to end: the slot it holds frees within moments, not at a long run's pace.
FRESH_CLAIM_SECONDS = 2.0


def concurrency_deferral_delay(*, frees_soon: bool = False) -> timedelta:
    """How long a run over the concurrency limit waits: QUOTA_DEFER_SECONDS, spread by
    +-50%; QUOTA_RECHECK_SECONDS when the runs over the limit were all claimed moments ago
    (`frees_soon`: other workers' batches, whose claimed runs count as running while they
    wait their turn in the batch), so that a default stack's batches do not hold a run
    back for seconds behind runs that end in milliseconds.

    Claims that race for the last slot each see the others and all defer (the count errs
    towards the quota). Deferred for the same time, they would be promoted in the same tick,
    claimed together and deferred together again, round after round; spread out, they come
    back one by one and the first takes the slot."""
    base = settings.QUOTA_RECHECK_SECONDS if frees_soon else settings.QUOTA_DEFER_SECONDS
    return timedelta(seconds=base * random.uniform(0.5, 1.5))


def _over_quota(
    *,
    tenant: Tenant,
    concurrent_runs: int,
    runs_this_hour: int,
    compute_minutes: float,
    now: datetime,
    settled_runs: int | None = None,
) -> Deferral | None:
    """`concurrent_runs` includes the run being checked, `runs_this_hour` does not;
    `settled_runs` is how many of the others were claimed FRESH_CLAIM_SECONDS ago or more
    (None: all of them)."""
    settled = concurrent_runs - 1 if settled_runs is None else settled_runs
    pool_slots = settings.WORKER_TENANT_POOLS.get(tenant.slug)
    if pool_slots is not None and concurrent_runs > pool_slots:  # its worker pool's cap
        delay = concurrency_deferral_delay(frees_soon=settled < pool_slots)
        return Deferral("worker_pool_slots", now + delay, concurrent_runs - 1, pool_slots)
    if concurrent_runs > tenant.max_concurrent_runs:
        return Deferral(
            "max_concurrent_runs",
            now + concurrency_deferral_delay(frees_soon=settled < tenant.max_concurrent_runs),
            concurrent_runs - 1,
            tenant.max_concurrent_runs,
        )
    if runs_this_hour >= tenant.max_runs_per_hour:
        return Deferral(
            "max_runs_per_hour", _next_hour(now), runs_this_hour, tenant.max_runs_per_hour
        )
    if compute_minutes >= tenant.max_compute_minutes_per_month:
        return Deferral(
            "max_compute_minutes_per_month",
            _next_month(now),
            compute_minutes,
            tenant.max_compute_minutes_per_month,
        )
    return None


@dataclass(frozen=True)
class Running:
    """A tenant's running runs after a claim committed (its own included), and how many
    of them were claimed FRESH_CLAIM_SECONDS or more before `now`."""

    total: int
    settled: int


def quota_running_count(*, tenant_id: object, now: datetime) -> Running:
    """Running executions of the tenant (after a claim has committed: this one included).

    Its own statement after the claim's commit, never folded into the claim: of two claims
    racing for the last slot, at least one then sees the other, so the limit is never
    exceeded (it may defer both, which errs towards the quota)."""
    row = db_rows.execute_prepared(
        f"SELECT count(*), count(*) FILTER (WHERE started_at <= %s) "
        f"FROM {TaskExecution._meta.db_table} WHERE tenant_id = %s AND status = %s",
        [now - timedelta(seconds=FRESH_CLAIM_SECONDS), tenant_id, ExecutionStatus.RUNNING.value],
    )
    return Running(total=row[0], settled=row[1])


@dataclass(frozen=True)
class ClaimCount:
    """Where a claim's quota counters sit in a worker's Redis pipeline (see
    `quota_count_runs_into`)."""

    start: int
    now: datetime


def quota_uncount_run_into(
    pipe: redis.client.Pipeline, *, tenant_id: object, counted: ClaimCount
) -> None:
    """Undo the count (`quota_count_runs_into`) of one claimed run handed back unstarted."""
    pipe.decr(_runs_key(tenant_id, counted.now))


def quota_count_runs_into(
    pipe: redis.client.Pipeline, *, tenant_id: object, runs: int, now: datetime
) -> ClaimCount:
    """Queue on `pipe`: count `runs` runs of one tenant in the hour (one INCRBY, first: of
    two racing claims one sees the other) and read the month's compute seconds.
    Read back with `quota_replies`; the k-th run of the batch (from 0) is the
    (total - runs + k + 1)-th of the hour."""
    start = len(pipe)
    pipe.incrby(_runs_key(tenant_id, now), runs)
    pipe.expire(_runs_key(tenant_id, now), 2 * 3600)
    pipe.get(_seconds_key(tenant_id, now))
    return ClaimCount(start=start, now=now)


def quota_replies(counted: ClaimCount, replies: list | None) -> tuple[int | None, float | None]:
    """The hour's run count after the INCR(BY) and the month's compute seconds, or None for
    what Redis did not answer."""
    if replies is None:
        return None, None
    runs_after, seconds = replies[counted.start], replies[counted.start + 2]
    return (
        None if isinstance(runs_after, Exception) else int(runs_after),
        None if isinstance(seconds, Exception) or seconds is None else float(seconds),
    )


def quota_decide_counts(
    *,
    tenant: Tenant,
    running: int,
    runs_after: int | None,
    seconds: float | None,
    now: datetime,
    settled: int | None = None,
) -> Deferral | None:
    """The deferral a claimed run is due, None when it may run. `runs_after` is this run's
    place in the hour (itself included), `seconds` the month's compute seconds; what Redis
    did not answer (None) counts as nothing: the Redis quotas err towards running.
    `settled`: of the other running runs, those claimed a while ago (`Running.settled`)."""
    return _over_quota(
        tenant=tenant,
        concurrent_runs=running,
        runs_this_hour=max(0, (runs_after or 0) - 1),
        compute_minutes=round((seconds or 0) / 60, 3),
        now=now,
        settled_runs=settled,
    )


def quota_defer_batch(deferred: Sequence[tuple[TaskExecution, uuid.UUID, Deferral]]) -> int:
    """Put a batch's claimed runs over quota back to pending, each at its deferral's time,
    with one statement, and tell each tenant's admins once per quota and window; returns how
    many went back (a run whose claim was lost meanwhile is left alone). Their hourly counts
    are the caller's to take back (`RunLedger.unstart` with their counts, in its one
    round trip)."""
    if not deferred:
        return 0
    now = timezone.now()
    executions = TaskExecution._meta.db_table
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            f"UPDATE {executions} e SET status = %s, scheduled_at = u.until, queued_at = NULL, "
            "started_at = NULL, worker_id = '', claim_token = NULL, lease_expires_at = NULL, "
            # Waiting on the quota now, not on a flow-control limit it may have waited on.
            "waiting_for = NULL, flow_wake_at = NULL, updated_at = %s "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::timestamptz[]) AS u(id, token, until) "
            "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s RETURNING e.id",
            [
                ExecutionStatus.PENDING.value,
                now,
                [execution.id for execution, _token, _deferral in deferred],
                [token for _execution, token, _deferral in deferred],
                [deferral.until for _execution, _token, deferral in deferred],
                ExecutionStatus.RUNNING.value,
            ],
            prepare=db_rows.prepare_statements(),
        )
        back = {row[0] for row in cursor.fetchall()}
    told: set[tuple[object, str]] = set()
    for execution, _token, deferral in deferred:
        if execution.id in back and (execution.tenant_id, deferral.quota) not in told:
            told.add((execution.tenant_id, deferral.quota))
            _notify_once(tenant=execution.tenant, deferral=deferral, now=now)
    return len(back)


def compute_seconds_add_into(
    pipe: redis.client.Pipeline, *, tenant_id: object, seconds: float, now: datetime
) -> None:
    key = _seconds_key(tenant_id, now)
    pipe.incrbyfloat(key, max(0.0, seconds))
    pipe.expire(key, 40 * 86400)


def _notify_once(*, tenant: Tenant, deferral: Deferral, now: datetime) -> None:
    window = _hour_window(now)
    try:
        first = get_redis().set(
            redis_key(f"quota-notified:{tenant.id}:{deferral.quota}:{window}"),
            "1",
            nx=True,
            ex=3600,
        )
    except redis.RedisError:
        first = True
    if first:
        audit_record(
            tenant=tenant,
            actor="system",
            action="quota.exceeded",
            object_type="tenant",
            object_id=str(tenant.id),
            detail={
                "quota": deferral.quota,
                "usage": deferral.usage,
                "limit": deferral.limit,
                "deferred_until": deferral.until.isoformat(),
                "notify": "tenant-admins",
            },
        )
