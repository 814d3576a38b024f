"""`manage.py backup` and `restore` when something is wrong: one clear message, an exit code,
nothing changed and never the password. (A backup restored and resumed by a real beat:
tests/integration/test_backup_restore.py.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest
from django.core.management import CommandError, call_command

from data_lifecycle.services.database_backup import (
    EXIT_ENVIRONMENT,
    BackupError,
    Database,
    client_binary,
    default_database,
)
from tests.processes import ROOT, service_env

PASSWORD = "s3cret-pw-never-shown"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_database_is_exit_code_2_with_one_line_and_no_password(tmp_path):
    url = f"postgres://postgres:{PASSWORD}@127.0.0.1:{_closed_port()}/scheduler"
    done = subprocess.run(
        [sys.executable, "manage.py", "backup", str(tmp_path / "x.dump")],
        cwd=ROOT,
        env=service_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_ENVIRONMENT
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: cannot reach the database")
    assert PASSWORD not in done.stderr + done.stdout
    assert not list(tmp_path.iterdir())  # no file that looks like a backup


def test_a_restore_target_that_cannot_be_reached_names_it_without_its_password(tmp_path):
    dump = tmp_path / "x.dump"
    dump.write_bytes(b"")
    url = f"postgres://postgres:{PASSWORD}@127.0.0.1:{_closed_port()}/fresh"
    with pytest.raises(CommandError) as raised:
        call_command("restore", str(dump), target_url=url)
    assert raised.value.returncode == EXIT_ENVIRONMENT
    assert "cannot reach" in str(raised.value) and PASSWORD not in str(raised.value)


def test_a_missing_client_binary_is_an_environment_error_naming_what_to_install(settings):
    settings.POSTGRES_BIN_DIR = "/nonexistent"
    with pytest.raises(BackupError) as raised:
        client_binary("pg_dump_missing", major=15)
    assert raised.value.exit_code == EXIT_ENVIRONMENT
    assert "postgresql-client-15" in str(raised.value)


def test_the_password_goes_to_the_client_in_its_environment_never_on_its_command_line():
    database = Database.from_url(
        f"postgres://app:{PASSWORD}@db.internal:5433/sched?sslmode=require"
    )
    assert PASSWORD not in database.conninfo() and PASSWORD not in repr(database)
    assert "sslmode=require" in database.conninfo()
    assert database.client_env()["PGPASSWORD"] == PASSWORD
    assert database.scrub(f"FATAL: bad {PASSWORD}") == "FATAL: bad ********"


@pytest.mark.django_db(transaction=True)
def test_a_restore_refuses_a_database_that_has_tables_and_changes_nothing(tmp_path):
    dump = tmp_path / "scheduler.dump"
    call_command("backup", str(dump))
    live = default_database()  # the test database itself: not fresh
    with pytest.raises(CommandError, match=r"already has \d+ tables"):
        call_command("restore", str(dump), target_database=live.dbname)


@pytest.mark.django_db
def test_a_file_that_is_not_a_backup_is_refused_before_any_database_is_made(tmp_path):
    junk = tmp_path / "junk.dump"
    junk.write_text("not a dump")
    name = f"never_made_{uuid.uuid4().hex[:8]}"
    with pytest.raises(CommandError, match="not a backup pg_restore can read"):
        call_command("restore", str(junk), target_database=name)
    with default_database().named("postgres").connect() as maintenance:
        made = maintenance.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        assert made.fetchone() is None
