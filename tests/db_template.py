"""The test database cloned from a migrated template instead of migrated afresh.

Migrating the test database (about seventy migrations, the executions table converted to
partitions among them) took a minute per pytest process on a loaded 2-core machine, and
every xdist worker of every run paid it. PostgreSQL copies a database from a template in
`CREATE DATABASE ... TEMPLATE` in well under a second, so the first process to need a given
schema migrates as before and saves the result as a template; every later one (the other
xdist worker, the next run, another worktree with the same migrations) clones it.

A template is named after a digest of what decides the migrated database: every installed
app's migration files, the Django version, and the UTC day (migration 0005 creates the
executions partitions around the day it runs, so a template is at most a day old). A change
to any migration is a new name, so a stale schema is never cloned. Templates unused for a
week are dropped (their names carry no owner: any run may prune them).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from datetime import UTC, datetime
from pathlib import Path

import django
from django.apps import apps
from django.conf import settings
from django.db.backends.postgresql.creation import DatabaseCreation

TEMPLATE_PREFIX = "test_sched_tpl_"
STALE_DAYS = 7


def schema_digest(*, day: str | None = None) -> str:
    """What decides the migrated database, as a short digest (see the module's docstring)."""
    digest = hashlib.sha256(django.get_version().encode())
    digest.update((day or datetime.now(UTC).date().isoformat()).encode())
    for config in sorted(apps.get_app_configs(), key=lambda c: c.label):
        digest.update(config.label.encode())
        try:
            module = importlib.import_module(f"{config.name}.migrations")
        except ImportError:
            continue
        folder = Path(module.__file__).parent
        for path in sorted(folder.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def template_name() -> str:
    return f"{TEMPLATE_PREFIX}{schema_digest()}"


def _template_exists(cursor, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s AND datistemplate", [name])
    return cursor.fetchone() is not None


def _prune_stale(cursor) -> None:
    """Drop the templates nobody cloned for STALE_DAYS (the date is in their comment)."""
    cursor.execute(
        "SELECT d.datname FROM pg_database d "
        "LEFT JOIN pg_shdescription s ON s.objoid = d.oid "
        "WHERE d.datname LIKE %s AND d.datistemplate "
        "AND coalesce(s.description, '') < %s",
        [f"{TEMPLATE_PREFIX}%", _day_mark(days_ago=STALE_DAYS)],
    )
    for (name,) in cursor.fetchall():
        # A clone in progress holds the template: then it is not stale after all.
        with contextlib.suppress(Exception):
            cursor.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE false')
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _day_mark(*, days_ago: int = 0) -> str:
    """A day as its ordinal, zero-padded so that text order is date order (for _prune_stale)."""
    return str(datetime.now(UTC).date().toordinal() - days_ago).zfill(8)


def _mark_used(cursor, name: str) -> None:
    cursor.execute(f"COMMENT ON DATABASE \"{name}\" IS '{_day_mark()}'")


def _save_template(creation: DatabaseCreation, source: str, name: str) -> None:
    """Copy the freshly migrated `source` into the template `name`; another process that
    saved it first wins (the copies are the same)."""
    creation.connection.close()  # CREATE DATABASE ... TEMPLATE needs the source unused
    with creation._nodb_cursor() as cursor:
        building = f"{name}_b{os.getpid()}"
        try:
            cursor.execute(f'CREATE DATABASE "{building}" TEMPLATE "{source}"')
        except Exception:  # a template is a speed-up, never a failure
            return
        try:
            # A rename is atomic: no process ever clones a half-copied template.
            cursor.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
            cursor.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE true')
            _mark_used(cursor, name)
        except Exception:  # saved meanwhile by another process
            with contextlib.suppress(Exception):
                cursor.execute(f'DROP DATABASE IF EXISTS "{building}"')


def _clone(creation: DatabaseCreation, test_name: str, template: str) -> bool:
    with creation._nodb_cursor() as cursor:
        if not _template_exists(cursor, template):
            return False
        cursor.execute(f'DROP DATABASE IF EXISTS "{test_name}"')
        try:
            cursor.execute(f'CREATE DATABASE "{test_name}" TEMPLATE "{template}"')
        except Exception:  # pruned meanwhile, or held: then migrate as without a template
            cursor.execute(f'DROP DATABASE IF EXISTS "{test_name}"')
            return False
        with contextlib.suppress(Exception):
            _mark_used(cursor, template)
            _prune_stale(cursor)
    return True


def install() -> None:
    """From here on in this process, Django's test database creation clones the migrated
    template when there is one, and saves one after migrating when there is not."""
    original = DatabaseCreation.create_test_db
    if getattr(original, "clones_template", False):
        return

    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        template = template_name()
        test_name = self._get_test_db_name()
        if keepdb or not _clone(self, test_name, template):
            name = original(self, verbosity, autoclobber, serialize, keepdb)
            if not keepdb:
                _save_template(self, name, template)
                self.connection.ensure_connection()
            return name
        # What Django's create_test_db does after its migrate (base/creation.py): the clone
        # has the cache tables and Django's post_migrate rows already.
        self.connection.close()
        settings.DATABASES[self.connection.alias]["NAME"] = test_name
        self.connection.settings_dict["NAME"] = test_name
        if serialize:
            self.connection._test_serialized_contents = self.serialize_db_to_string()
        self.connection.ensure_connection()
        return test_name

    create_test_db.clones_template = True
    DatabaseCreation.create_test_db = create_test_db
