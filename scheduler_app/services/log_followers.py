"""A tenant's open live-log streams, counted in Redis: at most
LOG_STREAMS["MAX_OPEN_PER_TENANT"] at once (the next one answers 429).

One sorted set per tenant: a member per open stream, scored with the time its lease ends.
Opening drops the expired members and adds one only below the cap, in one script (two
viewers racing for the last place cannot both get it). A stream renews its lease while it
runs and removes its member when it closes; a stream whose process was killed stops
renewing, and its place frees itself when the lease ends.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis.asyncio
from django.conf import settings

from scheduler_app.errors import DomainError
from scheduler_app.redis_client import get_redis, redis_key

_OPEN = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class TooManyLogStreams(DomainError):
    status_code = 429
    code = "too_many_log_streams"


@dataclass(frozen=True)
class LogFollower:
    key: str
    member: str


def _key(tenant_id: object) -> str:
    return redis_key(f"log-followers:{tenant_id}")


def _lease_seconds() -> float:
    return settings.LOG_STREAMS["LEASE_SECONDS"]


def log_follower_open(*, tenant_id: object) -> LogFollower:
    """Take one of the tenant's places, or raise TooManyLogStreams (429)."""
    cap = settings.LOG_STREAMS["MAX_OPEN_PER_TENANT"]
    follower = LogFollower(key=_key(tenant_id), member=uuid.uuid4().hex)
    now = time.time()
    lease = _lease_seconds()
    taken = get_redis().eval(
        _OPEN, 1, follower.key, now, now + lease, follower.member, cap, int(lease) + 1
    )
    if not taken:
        raise TooManyLogStreams(
            f"this tenant already follows {cap} live logs; close one or try again later"
        )
    return follower


async def log_follower_renew(follower: LogFollower, client: redis.asyncio.Redis) -> None:
    lease = _lease_seconds()
    await client.zadd(follower.key, {follower.member: time.time() + lease}, xx=True)
    await client.expire(follower.key, int(lease) + 1)


async def log_follower_close(follower: LogFollower, client: redis.asyncio.Redis) -> None:
    await client.zrem(follower.key, follower.member)


def log_followers_open_count(*, tenant_id: object) -> int:
    """Open (unexpired) streams of the tenant."""
    return get_redis().zcount(_key(tenant_id), time.time(), "+inf")
