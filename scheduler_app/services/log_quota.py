"""The per-tenant log storage quota (`Tenant.max_log_bytes`, default 100 GB).

Counted as logs are stored: a Redis counter per tenant, raised by the size of each stored log
in the end-of-run pipeline the worker sends anyway (no extra round trip), lowered when the
retention deletes logs. Over the quota, a run's log is cut to what still fits and ends with a
marker line that says why; nothing else changes (the run ran, its status and result are
stored). The worker reads the counter at most every LOG_QUOTA_CACHE_SECONDS (2 s) per
tenant, so a burst of finishes can overshoot the quota by what they log in that time. Losing
Redis resets the counter, which errs towards storing logs (like the other usage counters).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import redis
from django.conf import settings

from scheduler_app.models import Tenant
from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

_cache: dict[str, tuple[float, int]] = {}


def log_usage_key(tenant_id: object) -> str:
    return redis_key(f"usage:{tenant_id}:log_bytes")


def log_bytes_used(*, tenant_id: object, fresh: bool = False) -> int:
    key = str(tenant_id)
    cached = _cache.get(key)
    if cached is not None and not fresh and cached[0] > time.monotonic():
        return cached[1]
    try:
        used = int(get_redis().get(log_usage_key(tenant_id)) or 0)
    except redis.RedisError:
        used = 0
    _cache[key] = (time.monotonic() + settings.LOG_QUOTA_CACHE_SECONDS, used)
    return used


def quota_marker(tenant: Tenant, *, used: int) -> str:
    return (
        f"[log cut: tenant {tenant.slug} has used {used} of its {tenant.max_log_bytes} bytes of "
        "log storage (max_log_bytes); the run itself ran]"
    )


def stored_log(*, tenant: Tenant, text: str, truncated: bool) -> tuple[str, bool]:
    """The log text to store for a run of `tenant`, and whether it is truncated: all of it
    while it fits under the quota, else what fits followed by the marker line."""
    if not text:
        return text, truncated
    used = log_bytes_used(tenant_id=tenant.id)
    room = tenant.max_log_bytes - used
    encoded = text.encode("utf-8")
    if len(encoded) <= room:
        return text, truncated
    marker = quota_marker(tenant, used=used) + "\n"
    keep = max(0, room - len(marker.encode("utf-8")))
    head = encoded[:keep].decode("utf-8", "ignore")
    head = head[: head.rfind("\n") + 1] if "\n" in head else ""  # whole lines only
    return head + marker, True


def log_bytes_count_into(pipe: Any, *, tenant_id: object, text: str) -> None:
    """Queue the count of a stored log on the end-of-run pipeline (sent after the commit)."""
    if text:
        pipe.incr(log_usage_key(tenant_id), len(text.encode("utf-8")))


def log_bytes_release(rows: Iterable[dict[str, Any]]) -> None:
    """Logs deleted (retention): lower their tenants' counters."""
    freed: dict[str, int] = {}
    for row in rows:
        tenant_id = str(row["tenant_id"])
        freed[tenant_id] = freed.get(tenant_id, 0) + int(row.get("size_bytes") or 0)
    try:
        pipe = get_redis().pipeline(transaction=False)
        for tenant_id, size in freed.items():
            pipe.decrby(log_usage_key(tenant_id), size)
        pipe.execute()
    except redis.RedisError:
        logger.exception("could not lower the log storage counters")
