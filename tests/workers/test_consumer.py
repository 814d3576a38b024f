"""The worker's consumer reconnects to the broker on a short backoff (workers/consumer.py)."""

from __future__ import annotations

import socket

import pytest
from celery.utils.imports import symbol_by_name
from kombu import Connection
from kombu.exceptions import OperationalError

from project.celery import app
from workers.consumer import RECONNECT_BACKOFF, Consumer, with_short_backoff


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


def test_workers_run_this_consumer():
    """What Celery's WorkController instantiates (its `worker_consumer` setting)."""
    assert symbol_by_name(app.conf.worker_consumer) is Consumer


def test_a_lost_broker_is_retried_on_the_short_intervals():
    """A real connection to a port nothing listens on: the waits between attempts are
    RECONNECT_BACKOFF's (1 s, 2 s, ...), not kombu's (2 s, 4 s, ... up to 30 s)."""
    waits: list[float] = []
    conn = with_short_backoff(Connection(f"redis://127.0.0.1:{_closed_port()}/0"))
    with pytest.raises(OperationalError):
        conn.ensure_connection(lambda exc, interval: waits.append(interval), 2)
    start, step = RECONNECT_BACKOFF["interval_start"], RECONNECT_BACKOFF["interval_step"]
    assert waits == [start, start + step]
    assert RECONNECT_BACKOFF["interval_max"] <= 5
