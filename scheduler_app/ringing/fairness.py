"""Fair dispatch: bound how long another tenant's run waits behind one tenant's doorbells.

Celery queues are FIFO lists, so 5,000 doorbells of one tenant ahead of another tenant's one
would make it wait for all 5,000. So each tenant may have only so many doorbells waiting in a
tier's broker queue at a time (a Redis sorted set per tenant and tier: member = execution id,
score = publish time). A doorbell over the cap is not sent: `fair_admit` returns it as held
back, the caller that rings (`scheduler_app.ringing.ring`) puts its row back to `pending`
(same scheduled_at), and the leader's promote loop offers it again on a later tick. This
module decides in Redis only and writes no database row, so a thread that publishes (the
beat's publisher) needs no database connection for it.

The cap adapts to how fast the fleet drains the tier, so it is a bound in *time*, not in
messages:

    cap = max(FAIR_INFLIGHT_PER_TENANT, drain rate x FAIR_QUEUE_SECONDS / busy tenants)

where the drain rate is the most doorbells of the tier that reached a worker in one second
over the last few seconds (workers count them when they release a slot) and busy tenants are
those that published to the tier lately. All busy tenants together then keep about
FAIR_QUEUE_SECONDS of work in the queue, so another tenant's run starts within about that
long, while a single busy tenant on an idle fleet gets the fleet's whole throughput: its
burst is not held back as long as the fleet drains it within FAIR_QUEUE_SECONDS. The floor
keeps a cold fleet (no rate measured yet) dispatching: FAIR_INFLIGHT_PER_TENANT, and while
the tier has drained nothing in the last seconds, for a caller that rings in batches and
knows the fleet (the beat), one round of the fleet (its live processes x the doorbell
batch): a burst on an idle fleet fills every process at once instead of climbing from the
fixed floor tick by tick. Once the tier drains, the floor is FAIR_INFLIGHT_PER_TENANT again
and the cap grows with what the fleet actually drains.

A worker removes the id when the message reaches it; entries older than
FAIR_INFLIGHT_STALE_SECONDS are forgotten, so a lost message cannot block a tenant.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

import redis
from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.ringing.doorbell import Doorbell

logger = logging.getLogger(__name__)

# Seconds of drain counters kept and looked at (the current one included).
RATE_WINDOW_SECONDS = 3
# A tenant that published to a tier within this long counts as busy there.
BUSY_SECONDS = 5.0

# KEYS[1] = in-flight set of (tenant, tier), KEYS[2] = busy tenants of the tier,
# KEYS[3..] = drained counters of the tier for the last seconds;
# ARGV: now, stale_before, floor, queue_seconds, tenant_id, busy_since, cold floor (the
# floor while the tier has drained nothing lately), ids... -> ids admitted
_ADMIT = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
redis.call('EXPIRE', KEYS[2], 60)
local busy = math.max(1, redis.call('ZCARD', KEYS[2]))
local rate = 0
for i = 3, #KEYS do
  rate = math.max(rate, tonumber(redis.call('GET', KEYS[i]) or '0'))
end
local floor = tonumber(ARGV[3])
if rate == 0 then
  floor = math.max(floor, tonumber(ARGV[7]))
end
local cap = math.max(floor, math.ceil(rate * tonumber(ARGV[4]) / busy))
local room = cap - redis.call('ZCARD', KEYS[1])
local admitted = {}
for i = 8, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    table.insert(admitted, ARGV[i])
  elseif room > 0 then
    redis.call('ZADD', KEYS[1], now, ARGV[i])
    room = room - 1
    table.insert(admitted, ARGV[i])
  end
end
redis.call('EXPIRE', KEYS[1], math.ceil(now - tonumber(ARGV[2])) + 60)
return admitted
"""


def _inflight_key(tenant_id: str, queue: str) -> str:
    return redis_key(f"fair:inflight:{tenant_id}:{queue}")


def _busy_key(queue: str) -> str:
    return redis_key(f"fair:busy:{queue}")


def _drained_key(queue: str, second: int) -> str:
    return redis_key(f"fair:drained:{queue}:{second}")


def _drained_keys(queue: str, now: float) -> list[str]:
    second = int(now)
    return [_drained_key(queue, second - back) for back in range(RATE_WINDOW_SECONDS)]


class Admission(NamedTuple):
    """What fair dispatch decided for a batch of doorbells, each in the order it came."""

    admitted: list[Doorbell]  # may be sent now
    held_back: list[Doorbell]  # over their tenant's cap: their rows go back to `pending`


def fair_admit(doorbells: Sequence[Doorbell], *, fleet_round: int = 0) -> Admission:
    """The doorbells that may be sent now, and those held back (Redis only: putting the
    held-back rows back to `pending` is the caller's, `services.ringing`). `fleet_round`:
    one round of the live fleet (processes x doorbell batch), the floor while the tier has
    drained nothing lately (see the module)."""
    floor = settings.FAIR_INFLIGHT_PER_TENANT
    if floor <= 0 or not doorbells:
        return Admission(list(doorbells), [])
    groups: dict[tuple[str, str], list[Doorbell]] = defaultdict(list)
    for bell in doorbells:
        groups[(bell.tenant_id, bell.queue)].append(bell)
    now = time.time()
    stale_before = now - settings.FAIR_INFLIGHT_STALE_SECONDS
    admitted: list[Doorbell] = []
    held_back: list[Doorbell] = []
    try:
        client = get_redis()
        script = client.register_script(_ADMIT)
        for (tenant_id, queue), bells in groups.items():
            ids = [bell.execution_id for bell in bells]
            allowed = set(
                script(
                    keys=[
                        _inflight_key(tenant_id, queue),
                        _busy_key(queue),
                        *_drained_keys(queue, now),
                    ],
                    args=[
                        now,
                        stale_before,
                        floor,
                        settings.FAIR_QUEUE_SECONDS,
                        tenant_id,
                        now - BUSY_SECONDS,
                        max(floor, fleet_round),
                        *ids,
                    ],
                )
            )
            for bell in bells:
                (admitted if bell.execution_id in allowed else held_back).append(bell)
    except redis.RedisError as error:
        # Fairness is best effort; never stop dispatching because its counter is away.
        logger.warning("fair dispatch unavailable, publishing everything: %s", error)
        return Admission(list(doorbells), [])
    return Admission(admitted, held_back)


def fair_promote_allowance(queues: Sequence[str], *, fleet_round: int = 0) -> int:
    """How many due rows of one tenant and tier are worth promoting in one go: the largest cap
    any single tenant could have in these tiers now (more would only be held back again)."""
    floor = settings.FAIR_INFLIGHT_PER_TENANT
    if floor <= 0:
        return 0
    now = time.time()
    try:
        keys = [key for queue in queues for key in _drained_keys(queue, now)]
        rate = max(int(value or 0) for value in get_redis().mget(keys)) if keys else 0
    except redis.RedisError:
        return floor
    if rate == 0:
        floor = max(floor, fleet_round)
    return max(floor, math.ceil(rate * settings.FAIR_QUEUE_SECONDS))


def fair_release_into(
    pipe: redis.client.Pipeline, *, execution_id: str, tenant_id: str | None, queue: str | None
) -> None:
    """Queue on `pipe` what `fair_release` does (a worker batches it with its other writes)."""
    if not tenant_id or not queue:
        return
    key = _drained_key(queue, int(time.time()))
    pipe.zrem(_inflight_key(tenant_id, queue), execution_id)
    pipe.incr(key)
    pipe.expire(key, RATE_WINDOW_SECONDS + 5)


def fair_release(*, execution_id: str, tenant_id: str | None, queue: str | None) -> None:
    """The doorbell reached a worker: it no longer waits in the broker, and counts towards
    the tier's drain rate."""
    if not tenant_id or not queue:
        return
    try:
        pipe = get_redis().pipeline(transaction=False)
        fair_release_into(pipe, execution_id=execution_id, tenant_id=tenant_id, queue=queue)
        pipe.execute()
    except redis.RedisError as error:
        logger.debug("fair release failed: %s", error)
