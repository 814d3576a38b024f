"""Which database a query goes to: the primary, except the lists people look at.

With `DATABASE_REPLICA_URL` set (a hot standby, or any streaming replica), the `replica`
alias exists and the selectors behind list views, dashboards and searches read it when their
caller asks (`listing_database`, the selectors' `for_listing=True`): those reads are many,
heavy and tolerate being a little behind. Nothing else does: every write, and every read that
decides a write (a claim, a fire, the overlap and catch-up checks, a service's read before
its UPDATE), stays on the primary, because a replica behind the primary would have them
decide on a past state (a fire recorded twice, an update lost). The router makes that the
default: an ORM query that names no database goes to the primary, and nothing may write to,
or migrate, the replica.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

REPLICA = "replica"


def listing_database() -> str:
    """The alias a list, a dashboard or a search reads: the replica when there is one."""
    return REPLICA if REPLICA in settings.DATABASES else DEFAULT_DB_ALIAS


class PrimaryRouter:
    """Django's database router: reads and writes on the primary unless a queryset names the
    replica itself (`.using(listing_database())`)."""

    def db_for_read(self, model, **hints) -> str:
        # A related row of a listed row comes from where that row came from (a consistent
        # page); anything else from the primary.
        instance = hints.get("instance")
        return getattr(getattr(instance, "_state", None), "db", None) or DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, first, second, **hints) -> bool:
        # Rows read from the replica are the primary's rows, a little older.
        return True

    def allow_migrate(self, db: str, app_label: str, **hints) -> bool:
        return db != REPLICA
