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
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.utils import timezone

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


def quota_check(*, tenant: Tenant, now: datetime) -> Deferral | None:
    """Called after the claim succeeded, so the concurrent count includes this run."""
    usage = tenant_usage(tenant=tenant, now=now)
    if usage.concurrent_runs > tenant.max_concurrent_runs:
        return Deferral(
            "max_concurrent_runs",
            now + timedelta(seconds=settings.QUOTA_DEFER_SECONDS),
            usage.concurrent_runs - 1,
            tenant.max_concurrent_runs,
        )
    if usage.runs_this_hour >= tenant.max_runs_per_hour:
        return Deferral(
            "max_runs_per_hour", _next_hour(now), usage.runs_this_hour, tenant.max_runs_per_hour
        )
    if usage.compute_minutes_this_month >= tenant.max_compute_minutes_per_month:
        return Deferral(
            "max_compute_minutes_per_month",
            _next_month(now),
            usage.compute_minutes_this_month,
            tenant.max_compute_minutes_per_month,
        )
    return None


def execution_defer(*, execution_id: uuid.UUID, claim_token: uuid.UUID, until: datetime) -> bool:
    """running (just claimed, handler not started) -> pending at `until`."""
    return (
        TaskExecution.objects.filter(
            id=execution_id, claim_token=claim_token, status=ExecutionStatus.RUNNING
        ).update(
            status=ExecutionStatus.PENDING,
            scheduled_at=until,
            queued_at=None,
            started_at=None,
            worker_id="",
            claim_token=None,
            lease_expires_at=None,
            updated_at=timezone.now(),
        )
        == 1
    )


def quota_enforce_on_claim(
    *, execution: TaskExecution, claim_token: uuid.UUID, now: datetime | None = None
) -> Deferral | None:
    """Defer the claimed run if its tenant is over a quota; otherwise count it."""
    now = now or timezone.now()
    tenant = execution.tenant  # loaded with the claim
    deferral = quota_check(tenant=tenant, now=now)
    if deferral is None:
        try:
            pipe = get_redis().pipeline()
            pipe.incr(_runs_key(tenant.id, now))
            pipe.expire(_runs_key(tenant.id, now), 2 * 3600)
            pipe.execute()
        except redis.RedisError as error:
            logger.warning("quota counter unavailable: %s", error)
        return None
    if execution_defer(execution_id=execution.id, claim_token=claim_token, until=deferral.until):
        _notify_once(tenant=tenant, deferral=deferral, now=now)
    return deferral


def compute_seconds_add(*, tenant_id: object, seconds: float, now: datetime | None = None) -> None:
    now = now or timezone.now()
    key = _seconds_key(tenant_id, now)
    try:
        pipe = get_redis().pipeline()
        pipe.incrbyfloat(key, max(0.0, seconds))
        pipe.expire(key, 40 * 86400)
        pipe.execute()
    except redis.RedisError as error:
        logger.warning("compute-minutes counter unavailable: %s", error)


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
