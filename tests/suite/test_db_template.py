"""The test database cloned from a migrated template (tests/db_template.py) is the database
migrations would have made: nothing left to apply, and a new schema is a new template."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests import db_template


@pytest.mark.django_db
def test_the_cloned_database_has_every_migration_applied():
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    assert plan == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_inherits")  # the executions' partitions
        assert cursor.fetchone()[0] > 0


def test_a_new_day_or_migration_is_a_new_template(tmp_path, monkeypatch):
    today = db_template.schema_digest(day="2026-01-01")
    assert db_template.schema_digest(day="2026-01-01") == today
    assert db_template.schema_digest(day="2026-01-02") != today
    # A migration's content is part of the name: change one byte, and it is another schema.
    import scheduler_app.migrations as migrations

    folder = tmp_path / "migrations"
    folder.mkdir()
    for path in Path(migrations.__file__).parent.glob("*.py"):
        (folder / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(migrations, "__file__", str(folder / "__init__.py"))
    assert db_template.schema_digest(day="2026-01-01") == today
    (folder / "0001_initial.py").write_text("# changed\n")
    assert db_template.schema_digest(day="2026-01-01") != today
