"""The one place settings read the environment (12-factor, with safe local defaults)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

# The Redis URL helpers live with the Redis client (the apps use them too); settings use
# them from here.
from scheduler_app.redis_urls import (  # noqa: F401
    REDIS_DATABASES,
    redis_neighbour_database_url,
    redis_url_with_credentials,
    redis_url_with_database,
    sentinel_url,
)

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


def database_from_url(url: str) -> dict:
    """Turn DATABASE_URL into a Django DATABASES entry. PostgreSQL is the only engine: the
    claims, fires and DAG counts are single statements that need its SKIP LOCKED, unnest and
    RETURNING.

    A multi-host URL (libpq's ``postgres://u@h1:5432,h2:5432/db?target_session_attrs=
    read-write``, a primary and its hot standby) becomes comma-separated HOST and PORT lists,
    which psycopg hands to libpq unchanged: libpq tries each host in turn and keeps the one
    that accepts writes, so after a promotion a new connection finds the new primary."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql", "pgsql"):
        options = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        user, hosts, ports = _url_hosts(parsed.netloc)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(user.partition(":")[0]),
            "PASSWORD": unquote(user.partition(":")[2]),
            "HOST": ",".join(hosts),
            "PORT": ",".join(ports) if any(ports) else "",
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ValueError(
        f"DATABASE_URL scheme {parsed.scheme!r} is not supported: use postgres://user@host/db"
    )


def _url_hosts(netloc: str) -> tuple[str, list[str], list[str]]:
    """(userinfo, hosts, ports) of a URL's netloc, which may list several ``host:port``
    (urllib reads only one). With several hosts, one without a port gets PostgreSQL's 5432."""
    user, _, hostlist = netloc.rpartition("@")
    hosts: list[str] = []
    ports: list[str] = []
    for item in hostlist.split(","):
        if item.startswith("["):  # an IPv6 literal: [::1]:5432
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        hosts.append(unquote(host))
        ports.append(port)
    if len(hosts) > 1:
        # libpq wants one port per host (or one for all): fill the gaps with the default.
        ports = [port or "5432" for port in ports]
    return user, hosts, ports
