"""The one place settings read the environment (12-factor, with safe local defaults)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

_TRUE = {"1", "true", "yes", "on"}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


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
    Sentinel: one `sentinel://[:password@]host:port/db` per sentinel, joined by `;`. The
    master's password and database number come from `redis_url` (its host is not used: the
    sentinels name the master)."""
    parsed = urlparse(redis_url)
    credentials = f":{parsed.password}@" if parsed.password else ""
    database = parsed.path.lstrip("/") or "0"
    return ";".join(f"sentinel://{credentials}{address}/{database}" for address in sentinels)


def database_from_url(url: str, *, base_dir: Path) -> dict:
    """Turn DATABASE_URL into a Django DATABASES entry (postgres:// or sqlite:///path)."""
    parsed = urlparse(url)
    if parsed.scheme in ("sqlite", "sqlite3"):
        path = unquote(parsed.path.lstrip("/")) if parsed.netloc == "" else parsed.netloc
        if url.startswith("sqlite:////"):
            path = "/" + path
        name = path if Path(path).is_absolute() else str(base_dir / path)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        }
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
    raise ValueError(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (postgres or sqlite)")
