"""The `quota_breached` rule: a tenant at or over one of its quotas (concurrent runs, runs
this hour, compute minutes this month, stored log bytes), told to the tenant's alert channels
once per quota and hour, and resolved (and said so) when it clears.

Evaluated with the other rules (every ALERTS_EVALUATE_SECONDS on the leader): one GROUP BY
on the running-runs index and one MGET of the usage counters, for every tenant at once. A
quota that clears and is breached again within the hour stays quiet until the hour since
its last incident has passed, so a tenant hovering at a limit is not told every 30 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import redis
from django.db.models import Count

from alerting.models import AlertIncident
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.redis_client import get_redis
from scheduler_app.services.log_quota import log_usage_key
from scheduler_app.services.quotas import usage_counter_keys

RULE = "quota_breached"
QUIET = timedelta(hours=1)


def _usage(tenants: list[Tenant], now: datetime) -> dict[Any, dict[str, float]]:
    running = dict(
        TaskExecution.platform.filter(status=ExecutionStatus.RUNNING)
        .values("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    keys = []
    for tenant in tenants:
        keys += [*usage_counter_keys(tenant_id=tenant.id, now=now), log_usage_key(tenant.id)]
    try:
        values = get_redis().mget(keys) if keys else []
    except redis.RedisError:
        values = [None] * len(keys)
    usage = {}
    for index, tenant in enumerate(tenants):
        runs, seconds, log_bytes = values[3 * index : 3 * index + 3]
        usage[tenant.id] = {
            "max_concurrent_runs": running.get(tenant.id, 0),
            "max_runs_per_hour": int(runs or 0),
            "max_compute_minutes_per_month": float(seconds or 0) / 60,
            "max_log_bytes": int(log_bytes or 0),
        }
    return usage


def quotas_breached(now: datetime) -> list[dict[str, Any]]:
    """{key, tenant_id, summary, usage} for every (tenant, quota) at or over its limit."""
    tenants = list(Tenant.objects.all())
    usage = _usage(tenants, now)
    recently = set(
        AlertIncident.platform.filter(rule=RULE, opened_at__gte=now - QUIET).values_list(
            "key", flat=True
        )
    )
    open_keys = set(
        AlertIncident.platform.filter(rule=RULE, resolved_at__isnull=True).values_list(
            "key", flat=True
        )
    )
    breached = []
    for tenant in tenants:
        for quota, used in usage[tenant.id].items():
            limit = getattr(tenant, quota)
            key = f"{tenant.id}:{quota}"
            if used < limit or (key in recently and key not in open_keys):
                continue
            breached.append(
                {
                    "key": key,
                    "tenant_id": tenant.id,
                    "usage": used,
                    "summary": (
                        f"tenant {tenant.slug} is at its {quota} quota ({used:g} of {limit}); "
                        "runs over it are deferred"
                    ),
                }
            )
    return breached
