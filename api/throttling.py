"""Per-tenant request rate limit, counted in Redis (fixed one-minute windows).

Fails open: if Redis is unreachable the API keeps answering (the limit protects the
platform; an outage of the counter must not become an outage of the API).
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from api.tenancy import request_access
from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


class TenantRateThrottle(BaseThrottle):
    def __init__(self) -> None:
        self._wait = 0.0

    def allow_request(self, request: Request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return True
        raw = getattr(request, "_request", request)
        access = getattr(raw, "tenant_access", None)
        if access is None:
            try:
                access = request_access(request)
            except Exception:  # staff without a tenant: nothing to count against
                return True
        limit = access.tenant.rate_limit_per_minute or settings.API_RATE_LIMIT_DEFAULT
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        key = redis_key(f"ratelimit:{access.tenant.id}:{window}")
        try:
            pipe = get_redis().pipeline()
            pipe.incr(key)
            pipe.expire(key, WINDOW_SECONDS * 2)
            count, _ = pipe.execute()
        except redis.RedisError as error:
            logger.warning("rate limit counter unavailable, allowing: %s", error)
            return True
        if int(count) <= limit:
            return True
        self._wait = (window + 1) * WINDOW_SECONDS - now
        return False

    def wait(self) -> float:
        return max(1.0, self._wait)
