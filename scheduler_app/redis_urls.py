"""Redis URLs: Sentinel's form, another database of the same server, a process's own
credentials. Pure functions (settings import them before Django is set up)."""

from __future__ import annotations

from urllib.parse import quote, urlparse, urlunparse


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
