"""The worker's broker consumer: Celery's, reconnecting on a short backoff.

Celery's consumer reconnects to the broker through kombu's `ensure_connection` with kombu's
defaults: 2 s, then 2 s more for each failed attempt, up to 30 s between attempts (Celery
offers no setting for them). A worker cut off from Redis for half a minute therefore tries
again only every 10-12 s, and starts taking runs again up to that long after Redis is back
(the chaos suite's worker-cut-from-redis case, a 30 s cut: 12 s and more). Attempts at most
RECONNECT_BACKOFF["interval_max"] apart bound that; one connection attempt per worker
every few seconds is nothing to a Redis that is down or restarting.

Set as Celery's `worker_consumer` (CELERY_WORKER_CONSUMER in project/settings/base.py).
"""

from __future__ import annotations

import functools

from celery.worker.consumer import Consumer as CeleryConsumer
from kombu import Connection

# kombu's `ensure_connection` intervals: 1 s, then 1 s more each attempt, at most 5 s apart.
RECONNECT_BACKOFF = {"interval_start": 1.0, "interval_step": 1.0, "interval_max": 5.0}


def with_short_backoff(conn: Connection) -> Connection:
    """`conn`, whose `ensure_connection` retries on RECONNECT_BACKOFF's intervals."""
    conn.ensure_connection = functools.partial(  # type: ignore[method-assign]
        type(conn).ensure_connection, conn, **RECONNECT_BACKOFF
    )
    return conn


class Consumer(CeleryConsumer):
    def ensure_connected(self, conn: Connection) -> Connection:
        return super().ensure_connected(with_short_backoff(conn))
