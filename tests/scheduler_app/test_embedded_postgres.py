"""`make run`'s embedded PostgreSQL (devstack.embedded_postgres): it starts, keeps its
data across a restart, stops without leaving a process behind, and lets no one in without
the password. Real servers from the pgserver wheel, in a temporary var dir."""

from __future__ import annotations

import socket
from pathlib import Path

import psutil
import psycopg
import pytest

from devstack import embedded_postgres


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _servers_on(data_dir: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["name"] == "postgres" and str(data_dir) in cmdline:
            found.append(process)
    return found


@pytest.fixture
def var_dir(tmp_path: Path):
    yield tmp_path / "var"
    for process in _servers_on(tmp_path / "var" / "postgres" / "data"):
        process.kill()  # only if a test failed half-way


def test_start_restart_keeps_data_and_stop_leaves_no_process(var_dir: Path):
    log = var_dir.parent / "postgres.log"
    server = embedded_postgres.start(var_dir=var_dir, port=_free_port(), log_path=log)
    try:
        with psycopg.connect(server.url(), autocommit=True) as connection:
            connection.execute("CREATE TABLE kept (value text)")
            connection.execute("INSERT INTO kept VALUES ('written before the restart')")
    finally:
        embedded_postgres.stop(server)
    assert server.process.returncode == 0, log.read_text()
    assert _servers_on(server.data_dir) == []

    # Another port this time: the URL changes, the data does not.
    again = embedded_postgres.start(var_dir=var_dir, port=_free_port(), log_path=log)
    try:
        assert again.port != server.port
        with psycopg.connect(again.url()) as connection:
            rows = connection.execute("SELECT value FROM kept").fetchall()
        assert rows == [("written before the restart",)]
    finally:
        embedded_postgres.stop(again)
    assert _servers_on(again.data_dir) == []


def test_a_server_left_by_a_killed_stack_is_stopped_before_the_next_start(var_dir: Path):
    log = var_dir.parent / "postgres.log"
    orphan = embedded_postgres.start(var_dir=var_dir, port=_free_port(), log_path=log)
    # The stack died without stopping it (SIGKILL): the postmaster is still running.
    server = embedded_postgres.start(var_dir=var_dir, port=_free_port(), log_path=log)
    try:
        assert orphan.process.wait(timeout=30) is not None
        with psycopg.connect(server.url()) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        # One postmaster on the data directory: the new one.
        assert [p.pid for p in _servers_on(server.data_dir)] == [server.process.pid]
    finally:
        embedded_postgres.stop(server)
    assert _servers_on(server.data_dir) == []


def test_without_the_password_a_local_user_is_refused(var_dir: Path):
    server = embedded_postgres.start(
        var_dir=var_dir, port=_free_port(), log_path=var_dir.parent / "postgres.log"
    )
    try:
        for url in (
            f"postgres://postgres@127.0.0.1:{server.port}/scheduler",
            f"postgres://postgres:guess@127.0.0.1:{server.port}/scheduler",
        ):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(url, connect_timeout=5).close()
    finally:
        embedded_postgres.stop(server)
    password_file = var_dir / "postgres" / "password"
    assert password_file.stat().st_mode & 0o077 == 0
