"""One Redis client per process for the scheduler's own keys (locks, status, counters)."""

from __future__ import annotations

import os
import threading

import redis
from django.conf import settings

_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}


def get_redis() -> redis.Redis:
    """A client for REDIS_URL, created anew after a fork (a socket must not be shared)."""
    key = (os.getpid(), settings.REDIS_URL)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    decode_responses=True,
                    socket_timeout=5,
                    socket_connect_timeout=5,
                    health_check_interval=30,
                )
                _clients[key] = client
    return client


def redis_key(name: str) -> str:
    return f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{name}"
