"""The one place settings read the environment (12-factor, with safe local defaults)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse, urlunparse

_TRUE = {"1", "true", "yes", "on"}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_secret(name: str, default: str = "") -> str:
    """A secret from ``NAME_FILE`` (a file holding the value, as Docker and Kubernetes secrets
    are mounted) or else from ``NAME``. A file keeps the value out of the process environment,
    which anything able to read ``/proc/<pid>/environ`` of the worker would see; setting both
    is refused, so nobody wonders which one won."""
    path = os.environ.get(f"{name}_FILE")
    if path in (None, ""):
        return os.environ.get(name, default)
    if os.environ.get(name) not in (None, ""):
        raise ValueError(f"set {name} or {name}_FILE, not both")
    return Path(path).read_text(encoding="utf-8").strip()


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    return raw.strip().lower() in _TRUE if raw not in (None, "") else default


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def sentinel_url(sentinels: list[str], *, redis_url: str) -> str:
    """The `sentinel://` URL kombu and Celery's result backend take for Redis behind
    Sentinel: one `sentinel://[user:password@]host:port/db` per sentinel, joined by `;`. The
    master's credentials and database number come from `redis_url` (its host is not used:
    the sentinels name the master)."""
    parsed = urlparse(redis_url)
    credentials = (
        f"{parsed.username or ''}:{parsed.password}@" if parsed.password is not None else ""
    )
    database = parsed.path.lstrip("/") or "0"
    return ";".join(f"sentinel://{credentials}{address}/{database}" for address in sentinels)


# Redis servers have 16 databases unless configured otherwise.
REDIS_DATABASES = 16


def redis_url_with_database(url: str, number: int) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{number}"))


def redis_neighbour_database_url(url: str) -> str:
    """The same server's next database (the one before, for the last): where live log tails
    go unless LIVE_LOGS_REDIS_URL says otherwise."""
    current = int(urlparse(url).path.lstrip("/") or 0)
    other = current + 1 if current + 1 < REDIS_DATABASES else current - 1
    return redis_url_with_database(url, other)


def redis_url_with_credentials(url: str, *, username: str, password: str) -> str:
    """`url` carrying REDIS_USERNAME / REDIS_PASSWORD, unless it names credentials itself
    (each process of a deployment connects as its own ACL user, deploy/redis/)."""
    parsed = urlparse(url)
    if not password or parsed.password is not None or parsed.username:
        return url
    host = parsed.netloc.rsplit("@", 1)[-1]
    login = f"{quote(username, safe='')}:{quote(password, safe='')}@"
    return urlunparse(parsed._replace(netloc=login + host))


def database_from_url(url: str) -> dict:
    """Turn DATABASE_URL into a Django DATABASES entry. PostgreSQL is the only engine: the
    claims, fires and DAG counts are single statements that need its SKIP LOCKED, unnest and
    RETURNING."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql", "pgsql"):
        options = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ValueError(
        f"DATABASE_URL scheme {parsed.scheme!r} is not supported: use postgres://user@host/db"
    )
