"""How a transactional test's database is emptied after it: DELETE, not Django's TRUNCATE.

Django flushes with one `TRUNCATE` of every table (about forty here, the partitioned
executions table among them). PostgreSQL truncates a table by giving it, its TOAST table and
every index new files, so that costs 1-2 s a test on a 2-core machine whatever the test
wrote, while deleting the few rows a test leaves takes milliseconds: one
`DELETE FROM` a table, empty or not, is a scan of what it holds. The end state is the same
(every table empty), with two exceptions kept on purpose: the content types and permissions,
which Django's flush deletes and its post_migrate handler writes back identically at once,
stay as they are.

A DELETE races a worker or beat of the test that is still writing where a TRUNCATE would
have waited for it: a row inserted meanwhile that points at a deleted one fails the flush's
deferred foreign key check (IntegrityError), and two writers can deadlock. The flush is
then tried again (it deletes the newcomer too), as the TRUNCATE was when PostgreSQL picked
it as a deadlock victim.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, OperationalError
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.backends.postgresql.operations import DatabaseOperations

# Rows Django's own post_migrate handlers recreate after a flush: deleting them only to
# have them written back costs a third of a second a test.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})
FLUSH_ATTEMPTS = 5


def flush_statements(quote_name, tables: list[str]) -> list[str]:
    """One statement (one round trip) that empties `tables` but KEPT_TABLES. Every foreign
    key Django creates is DEFERRABLE INITIALLY DEFERRED, so the order does not matter."""
    deletes = [f"DELETE FROM {quote_name(table)};" for table in tables if table not in KEPT_TABLES]
    return [" ".join(deletes)] if deletes else []


@contextmanager
def deleting_flush() -> Iterator[None]:
    """While inside: Django's flush (the transactional tests' teardown) deletes rows instead
    of truncating tables, and is tried again when a writer of the test got in its way."""
    original_sql = DatabaseOperations.sql_flush
    original_execute = BaseDatabaseOperations.execute_sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:  # not asked for by this suite; Django's own way keeps it right
            return original_sql(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return flush_statements(self.quote_name, tables)

    def execute_sql_flush(self, sql_list):
        for attempt in range(FLUSH_ATTEMPTS):
            try:
                return original_execute(self, sql_list)
            except (OperationalError, IntegrityError) as error:
                lost_race = isinstance(error, IntegrityError) or "deadlock detected" in str(error)
                if not lost_race or attempt == FLUSH_ATTEMPTS - 1:
                    raise
                time.sleep(0.2)  # the racing writer finishes its transaction meanwhile

    DatabaseOperations.sql_flush = sql_flush
    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = original_sql
        BaseDatabaseOperations.execute_sql_flush = original_execute
