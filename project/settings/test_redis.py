"""Give each test process a Redis db number of its own (claimed in db 0, expiring)."""

from __future__ import annotations

from urllib.parse import urlparse, urlunparse

import redis

CLAIM_KEY = "scheduler-tests:redis-db:{number}"
# A test run takes minutes; a killed one's claim frees itself within this.
CLAIM_SECONDS = 2 * 3600
FIRST_DB, LAST_DB = 1, 15


def _with_db(url: str, number: int) -> str:
    parsed = urlparse(url)
    return urlunparse(parsed._replace(path=f"/{number}"))


def claim_redis_db(base_url: str, *, owner: str) -> tuple[str, int]:
    admin = redis.Redis.from_url(_with_db(base_url, 0), socket_connect_timeout=3)
    try:
        for number in range(FIRST_DB, LAST_DB + 1):
            if admin.set(CLAIM_KEY.format(number=number), owner, nx=True, ex=CLAIM_SECONDS):
                client = redis.Redis.from_url(_with_db(base_url, number))
                client.flushdb()  # a crashed run may have left keys behind
                return _with_db(base_url, number), number
    except redis.ConnectionError as error:
        raise RuntimeError(
            f"Redis is not reachable at {base_url} ({error}). The test suite needs a real Redis: "
            "start one, or set REDIS_URL."
        ) from error
    raise RuntimeError(
        "every Redis db number 1-15 is claimed by another test run; "
        "delete the keys scheduler-tests:redis-db:* in db 0 if those runs are gone"
    )


def release_redis_db(base_url: str, number: int, *, owner: str) -> None:
    admin = redis.Redis.from_url(_with_db(base_url, 0), socket_connect_timeout=3)
    key = CLAIM_KEY.format(number=number)
    try:
        if (admin.get(key) or b"").decode() == owner:
            redis.Redis.from_url(_with_db(base_url, number)).flushdb()
            admin.delete(key)
    except redis.ConnectionError:
        pass  # Redis went away first; the claim expires by itself
