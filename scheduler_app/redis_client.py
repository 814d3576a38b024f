"""One Redis client per process for the scheduler's own keys (locks, status, counters), and
the one way every module connects to Redis, directly or through Sentinel."""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import unquote, urlparse

import redis
import redis.asyncio
import redis.asyncio.sentinel
from django.conf import settings
from redis.sentinel import Sentinel

from scheduler_app.redis_urls import sentinel_url

_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}

SENTINEL_SCHEME = "sentinel://"


def is_redis_url(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", SENTINEL_SCHEME))


def _sentinel_parts(url: str, options: dict[str, Any]) -> tuple[list, dict, dict]:
    """The sentinels' addresses, their own options and the master's, from the
    `sentinel://a;sentinel://b` form."""
    addresses = []
    for part in url.split(";"):
        parsed = urlparse(part.strip())
        addresses.append((parsed.hostname, parsed.port or 26379))
    first = urlparse(url.split(";", 1)[0])
    timeouts = {
        k: v for k, v in options.items() if k in ("socket_timeout", "socket_connect_timeout")
    }
    sentinel_options = {"password": settings.REDIS_SENTINEL_PASSWORD or None, **timeouts}
    master_options = {
        "db": int(first.path.lstrip("/") or 0),
        "username": unquote(first.username) if first.username else None,
        "password": unquote(first.password) if first.password else None,
        **options,
    }
    return addresses, sentinel_options, master_options


def redis_from_url(url: str, **options: Any) -> redis.Redis:
    """A client for `url`: a plain redis:// URL, or the `sentinel://a;sentinel://b` form
    kombu takes (`redis_connect_url()`), which connects to whatever master the sentinels
    name (settings.REDIS_SENTINEL_MASTER). A Sentinel-managed client asks again after a
    connection error, so a failover costs the commands in flight, not the client."""
    if not url.startswith(SENTINEL_SCHEME):
        return redis.Redis.from_url(url, **options)
    addresses, sentinel_options, master_options = _sentinel_parts(url, options)
    sentinel = Sentinel(addresses, sentinel_kwargs=sentinel_options)
    return sentinel.master_for(settings.REDIS_SENTINEL_MASTER, **master_options)


def async_redis_from_url(url: str, **options: Any) -> redis.asyncio.Redis:
    """`redis_from_url` for an event loop (the log streams the ASGI server follows)."""
    if not url.startswith(SENTINEL_SCHEME):
        return redis.asyncio.Redis.from_url(url, **options)
    addresses, sentinel_options, master_options = _sentinel_parts(url, options)
    sentinel = redis.asyncio.sentinel.Sentinel(addresses, sentinel_kwargs=sentinel_options)
    return sentinel.master_for(settings.REDIS_SENTINEL_MASTER, **master_options)


def redis_connect_url() -> str:
    """REDIS_URL, or its sentinel:// form when REDIS_SENTINELS is set."""
    if settings.REDIS_SENTINELS:
        return sentinel_url(settings.REDIS_SENTINELS, redis_url=settings.REDIS_URL)
    return settings.REDIS_URL


def get_redis() -> redis.Redis:
    """A client for REDIS_URL (through Sentinel when configured), created anew after a fork
    (a socket must not be shared)."""
    url = redis_connect_url()
    key = (os.getpid(), url)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = redis_from_url(
                    url,
                    decode_responses=True,
                    socket_timeout=5,
                    socket_connect_timeout=5,
                    health_check_interval=30,
                )
                _clients[key] = client
    return client


def redis_key(name: str) -> str:
    return f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{name}"
