"""Are PostgreSQL and Redis there? Used by `make test` before it starts."""

from __future__ import annotations

import os


def missing_services() -> dict[str, str]:
    missing: dict[str, str] = {}
    database_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        import psycopg

        from project.settings.env import database_from_url

        db = database_from_url(database_url)
        psycopg.connect(
            host=db["HOST"],
            port=db["PORT"] or 5432,
            user=db["USER"],
            password=db["PASSWORD"],
            dbname=db["NAME"],
            connect_timeout=3,
        ).close()
    except Exception as error:
        missing[f"PostgreSQL ({database_url})"] = str(error).strip().splitlines()[0]
    try:
        import redis

        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except Exception as error:
        missing[f"Redis ({redis_url})"] = str(error)
    return missing
