"""The database settings of a primary with a hot standby (docs/operations/disaster-recovery.md)
and of its backups (docs/operations/backups.md)."""

from __future__ import annotations

from typing import Any

from project.settings.env import database_from_url, env_float, env_secret, env_str

# A streaming replica (the hot standby) for list views, dashboards and searches only; every
# write and every read that decides one stays on the primary (scheduler_app/db_router.py).
DATABASE_REPLICA_URL = env_secret("DATABASE_REPLICA_URL", "")
DATABASE_ROUTERS = ["scheduler_app.db_router.PrimaryRouter"]
# How long a claim, a finish or a beat's fire keeps trying on a new connection when the
# primary is lost (scheduler_app/db_retry.py): longer than a standby's promotion takes.
DATABASE_RETRY_SECONDS = env_float("DATABASE_RETRY_SECONDS", 60.0)
# Where `manage.py backup` / `restore` find pg_dump and pg_restore ("": Debian's
# /usr/lib/postgresql/<server major>/bin, then PATH). docs/operations/backups.md.
POSTGRES_BIN_DIR = env_str("POSTGRES_BIN_DIR", "")


def replica_databases(*, conn_max_age: int) -> dict[str, dict[str, Any]]:
    """`DATABASES["replica"]` when a replica is configured, else nothing."""
    if not DATABASE_REPLICA_URL:
        return {}
    return {
        "replica": {
            **database_from_url(DATABASE_REPLICA_URL),
            "CONN_MAX_AGE": conn_max_age,
            # Tests read the test database through it (no second test database).
            "TEST": {"MIRROR": "default"},
        }
    }
