"""One runbook at a time per task or DAG: a broker may deliver the same crossing twice, and
two deliveries running at once would both find no retry yet and both retry.

A Redis lock (SET NX with a time to live, released only by its holder) rather than a
PostgreSQL one: the health check may take its whole timeout, and no database transaction or
session lock is held across it (a transaction-pooling PgBouncer would not keep a session
lock). A delivery that finds the turn taken skips; one that comes after the holder finished
finds the holder's retry or pause and skips too. The time to live outlasts the longest
health check, so a killed holder's turn frees itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.runbook_policy import MAX_HEALTH_CHECK_TIMEOUT

TURN_SECONDS = 4 * MAX_HEALTH_CHECK_TIMEOUT

# Deletes the key only while it still holds this holder's token.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def runbook_turn_key(kind: str, definition_id: str) -> str:
    return redis_key(f"runbook:turn:{kind}:{definition_id}")


@contextmanager
def runbook_turn(kind: str, definition_id: str) -> Iterator[bool]:
    """True when this delivery holds the turn of `kind` ("task" or "dag") `definition_id`."""
    client = get_redis()
    key, token = runbook_turn_key(kind, definition_id), uuid.uuid4().hex
    mine = bool(client.set(key, token, nx=True, ex=TURN_SECONDS))
    try:
        yield mine
    finally:
        if mine:
            client.eval(_RELEASE, 1, key, token)
