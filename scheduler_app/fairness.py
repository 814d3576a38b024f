"""Fair dispatch: a per-tenant cap on doorbells waiting in each tier's broker queue.

Celery queues are FIFO lists, so 5,000 doorbells of one tenant ahead of another tenant's
one would make it wait for all 5,000. Instead, at most FAIR_INFLIGHT_PER_TENANT doorbells
of one tenant wait in one tier at a time (a Redis sorted set per tenant and tier: member =
execution id, score = publish time). A doorbell over the cap is not sent: its row goes
back to `pending` (same scheduled_at) and the leader's promote loop offers it again on the
next tick, by which time the tenant's earlier runs have been picked up. Another tenant's
run is therefore never behind more than cap x tenants doorbells.

A worker removes the id when the message reaches it; entries older than
FAIR_INFLIGHT_STALE_SECONDS are forgotten, so a lost message cannot block a tenant.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis
from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

if TYPE_CHECKING:
    from scheduler_app.dispatch import Doorbell

logger = logging.getLogger(__name__)

# KEYS[1] = in-flight set; ARGV: now, stale_before, cap, ids... -> ids admitted
_ADMIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local room = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1])
local admitted = {}
for i = 4, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    table.insert(admitted, ARGV[i])
  elseif room > 0 then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    room = room - 1
    table.insert(admitted, ARGV[i])
  end
end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) - tonumber(ARGV[2])) + 60)
return admitted
"""


def _inflight_key(tenant_id: str, queue: str) -> str:
    return redis_key(f"fair:inflight:{tenant_id}:{queue}")


def fair_admit(doorbells: Sequence[Doorbell]) -> list[Doorbell]:
    """The doorbells that may be sent now; the others are put back to `pending`."""
    cap = settings.FAIR_INFLIGHT_PER_TENANT
    if cap <= 0 or not doorbells:
        return list(doorbells)
    groups: dict[tuple[str, str], list[Doorbell]] = defaultdict(list)
    for bell in doorbells:
        groups[(bell.tenant_id, bell.queue)].append(bell)
    now = time.time()
    stale_before = now - settings.FAIR_INFLIGHT_STALE_SECONDS
    admitted: list[Doorbell] = []
    held_back: list[str] = []
    try:
        client = get_redis()
        script = client.register_script(_ADMIT)
        for (tenant_id, queue), bells in groups.items():
            ids = [bell.execution_id for bell in bells]
            allowed = set(
                script(keys=[_inflight_key(tenant_id, queue)], args=[now, stale_before, cap, *ids])
            )
            for bell in bells:
                (
                    admitted.append(bell)
                    if bell.execution_id in allowed
                    else held_back.append(bell.execution_id)
                )
    except redis.RedisError as error:
        # Fairness is best effort; never stop dispatching because its counter is away.
        logger.warning("fair dispatch unavailable, publishing everything: %s", error)
        return list(doorbells)
    if held_back:
        from scheduler_app.services.firing import queued_hold_back

        queued_hold_back(execution_ids=held_back)
    return admitted


def fair_release(*, execution_id: str, tenant_id: str | None, queue: str | None) -> None:
    """The doorbell reached a worker: it no longer waits in the broker."""
    if not tenant_id or not queue:
        return
    try:
        get_redis().zrem(_inflight_key(tenant_id, queue), execution_id)
    except redis.RedisError as error:
        logger.debug("fair release failed: %s", error)
