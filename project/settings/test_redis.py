"""Give each test process a Redis db number of its own (claimed in db 0, expiring).

A claim names its owner and the process that holds it (`<owner>|<host>|<pid>`), so a run
that was killed before it could release its claims (SIGKILL, a CI timeout) does not keep
15 db numbers from every later run for two hours: when every number is taken, a claim whose
process is gone on this host is taken over (atomically: two runs cannot both take it). A
number held by a live run is waited for, for a while, before the run gives up.
"""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlparse, urlunparse

import redis

CLAIM_KEY = "scheduler-tests:redis-db:{number}"
# A test run takes minutes; a killed one's claim on another host frees itself within this.
CLAIM_SECONDS = 2 * 3600
FIRST_DB, LAST_DB = 1, 15
# How long a run waits for a number that live runs hold before it gives up.
CLAIM_WAIT_SECONDS = 120.0
# Take over a claim only if it still names the dead holder it was read with.
_TAKE_OVER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[2], 'ex', ARGV[3])
  return 1
end
return 0
"""


def _with_db(url: str, number: int) -> str:
    parsed = urlparse(url)
    return urlunparse(parsed._replace(path=f"/{number}"))


def _holder(owner: str) -> str:
    return f"{owner}|{socket.gethostname()}|{os.getpid()}"


def _holder_is_gone(holder: str) -> bool:
    """A claim made on this host by a process that no longer exists."""
    parts = holder.rsplit("|", 2)
    if (
        len(parts) != 3
        or parts[1] != socket.gethostname()
        or not (parts[2].isascii() and parts[2].isdigit())
    ):
        return False  # another host's, or an older format: left to its expiry
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _claim_once(admin: redis.Redis, holder: str) -> int | None:
    for number in range(FIRST_DB, LAST_DB + 1):
        if admin.set(CLAIM_KEY.format(number=number), holder, nx=True, ex=CLAIM_SECONDS):
            return number
    for number in range(FIRST_DB, LAST_DB + 1):
        key = CLAIM_KEY.format(number=number)
        current = (admin.get(key) or b"").decode()
        taken = current and _holder_is_gone(current)
        if taken and admin.eval(_TAKE_OVER, 1, key, current, holder, CLAIM_SECONDS):
            return number
    return None


def claim_redis_db(base_url: str, *, owner: str) -> tuple[str, int]:
    admin = redis.Redis.from_url(_with_db(base_url, 0), socket_connect_timeout=3)
    holder = _holder(owner)
    deadline = time.monotonic() + CLAIM_WAIT_SECONDS
    try:
        while True:
            number = _claim_once(admin, holder)
            if number is not None:
                client = redis.Redis.from_url(_with_db(base_url, number))
                client.flushdb()  # a crashed run may have left keys behind
                return _with_db(base_url, number), number
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)  # live runs hold every number: one of them ends soon
    except redis.ConnectionError as error:
        raise RuntimeError(
            f"Redis is not reachable at {base_url} ({error}). The test suite needs a real Redis: "
            "start one, or set REDIS_URL."
        ) from error
    raise RuntimeError(
        f"every Redis db number {FIRST_DB}-{LAST_DB} is held by a live test run (waited "
        f"{CLAIM_WAIT_SECONDS:.0f} s); the claims are the keys scheduler-tests:redis-db:* in db 0"
    )


def release_redis_db(base_url: str, number: int, *, owner: str) -> None:
    admin = redis.Redis.from_url(_with_db(base_url, 0), socket_connect_timeout=3)
    key = CLAIM_KEY.format(number=number)
    try:
        if (admin.get(key) or b"").decode() == _holder(owner):
            redis.Redis.from_url(_with_db(base_url, number)).flushdb()
            admin.delete(key)
    except redis.ConnectionError:
        pass  # Redis went away first; the claim expires by itself
