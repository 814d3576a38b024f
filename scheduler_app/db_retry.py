"""A statement that met a lost database connection, tried again on a new one.

A PostgreSQL primary that dies (SIGKILL, a lost host) breaks every open connection; its
hot standby is promoted, and the multi-host DATABASE_URL (``target_session_attrs=read-write``)
makes the next connection find it (docs/operations/disaster-recovery.md). Until then every
connection attempt fails. What the worker and the beat were committing meanwhile has an
unknown outcome: the COMMIT may have landed (and, with synchronous replication, reached the
standby) or not.

Retrying is safe because every write on the run path is idempotent by construction: a fire is
``INSERT ... ON CONFLICT (task, scheduled_at, attempt) DO NOTHING``, a claim is a
compare-and-swap on the status, a finish and a lease renewal are ``UPDATE ... WHERE
claim_token = :token``. A retry of a commit that had landed changes nothing (0 rows). So the
caller closes the broken connection, waits a little and runs the whole transaction again,
within `DATABASE_RETRY_SECONDS`; past that the error goes up as before.

Only outside a transaction: a retry inside an outer ``atomic()`` would run the second half of
a transaction whose first half is gone. The outermost caller is the one to retry.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Django wraps the driver's errors in its own classes; the hot path's raw psycopg cursors
# (`db_rows.server_bound_cursor`) raise psycopg's.
DISCONNECT_ERRORS = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
FIRST_PAUSE_SECONDS = 0.1
LONGEST_PAUSE_SECONDS = 1.0


def connection_lost(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the connection `alias` is gone (closed, broken, or never opened because no
    host accepted it), as opposed to a statement that failed on a live one (a lock timeout,
    a serialization failure: not ours to retry here)."""
    raw = connections[alias].connection
    return raw is None or raw.closed or raw.broken


def connection_discard(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Drop the broken connection; the next statement opens a new one (and libpq picks the
    host that accepts writes)."""
    with contextlib.suppress(*DISCONNECT_ERRORS):
        connections[alias].close()
    connections[alias].connection = None


def retry_seconds() -> float:
    return float(settings.DATABASE_RETRY_SECONDS)


def database_retry(
    action: Callable[[], T],
    *,
    what: str,
    within_seconds: float | None = None,
    alias: str = DEFAULT_DB_ALIAS,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> T:
    """`action()`, run again on a new connection while the connection keeps being lost,
    for at most `within_seconds` (DATABASE_RETRY_SECONDS). `action` must be a whole
    transaction (or one autocommit statement) whose repetition is harmless."""
    budget = retry_seconds() if within_seconds is None else within_seconds
    deadline = clock() + budget
    delay = FIRST_PAUSE_SECONDS
    attempt = 1
    while True:
        try:
            return action()
        except DISCONNECT_ERRORS as error:
            if connections[alias].in_atomic_block or not connection_lost(alias):
                raise
            if clock() + delay > deadline:
                logger.error("%s: the database stayed unreachable for %.0fs", what, budget)
                raise
            logger.warning(
                "%s: database connection lost (%s); again on a new connection (attempt %d)",
                what,
                str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
                attempt + 1,
            )
            connection_discard(alias)
            pause(delay)
            delay = min(delay * 2, LONGEST_PAUSE_SECONDS)
            attempt += 1
