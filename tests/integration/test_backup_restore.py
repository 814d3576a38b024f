"""A backup restored into a fresh database, and a real beat resumed on it: nothing fired twice.

A beat fires a per-second task (catchup `all`) while `manage.py backup` dumps the database
under it; `manage.py restore` puts the dump into a new database on the same server, and a
second beat, started against the restored database only, resumes. What the restored
database must show: every fire of the backup once, as it was (same ids, untouched); the fires
the lost timeline made after the backup caught up once (they are not in the dump: RPO is
the backup interval); the next fires once; one row per second, no gap.
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from data_lifecycle.services.database_backup import default_database
from scheduler_app.models import TaskExecution
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import database_url, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
]


def _fires(cursor_source, task_id) -> list[tuple]:
    """(scheduled_at, id) of the task's first attempts, oldest first."""
    table = TaskExecution._meta.db_table
    return [
        tuple(row)
        for row in cursor_source.execute(
            f"SELECT scheduled_at, id FROM {table} WHERE task_id = %s AND attempt = 1 "
            "ORDER BY scheduled_at",
            [task_id],
        ).fetchall()
    ]


def test_a_restored_backup_resumes_without_firing_anything_twice(tenant, beats, tmp_path):
    task = make_task(
        tenant,
        name="every-second",
        schedule={"type": "cron", "expression": "* * * * * *"},
        policy={"catchup": "all"},
    )
    restored = default_database().named(
        f"{connection.settings_dict['NAME']}_r{uuid.uuid4().hex[:8]}"
    )
    dump = tmp_path / "scheduler.dump"
    first = beats("before")
    second = None
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(task=task).count() >= 2,
            timeout=60,
            message="the first fires",
        )
        started = time.monotonic()
        call_command("backup", str(dump))  # while the beat fires: one snapshot all the same
        print(f"backup: {time.monotonic() - started:.2f} s")
        backed_up_count = TaskExecution.platform.filter(task=task).count()
        wait_until(
            lambda: TaskExecution.platform.filter(task=task).count() >= backed_up_count + 2,
            timeout=30,
            message="fires after the backup (the lost timeline's)",
        )
        first.stop(timeout=10)
        last_lost = TaskExecution.platform.filter(task=task).order_by("-scheduled_at").first()

        started = time.monotonic()
        call_command("restore", str(dump), target_database=restored.dbname)
        print(f"restore: {time.monotonic() - started:.2f} s")
        with restored.connect() as db:
            backed_up = _fires(db, task.id)
        assert len(backed_up) >= 2 and backed_up[-1][0] < last_lost.scheduled_at

        url = database_url().rsplit("/", 1)[0] + f"/{restored.dbname}"
        started = time.monotonic()
        second = beats("restored", DATABASE_URL=url)

        def resumed():
            with restored.connect() as db:
                fires = _fires(db, task.id)
            return fires if fires[-1][0] >= last_lost.scheduled_at + timedelta(seconds=2) else None

        after = wait_until(resumed, timeout=60, message="the restored beat to fire on")
        print(f"restored beat started to its fires: {time.monotonic() - started:.2f} s")
    except AssertionError:
        print(dump_logs(*(b for b in (first, second) if b)))
        raise
    finally:
        if second is not None:
            second.stop(timeout=10)
        with default_database().named("postgres").connect() as maintenance:
            maintenance.execute(f'DROP DATABASE IF EXISTS "{restored.dbname}" WITH (FORCE)')

    times = [scheduled_at for scheduled_at, _ in after]
    assert len(times) == len(set(times)), "a fire was recorded twice"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert set(gaps) == {timedelta(seconds=1)}, f"missed fires: {gaps}"
    # The backup's fires are there once, as they were; the restored beat added none of them.
    assert after[: len(backed_up)] == backed_up
