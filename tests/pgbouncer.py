"""A private PgBouncer in transaction pooling mode in front of the test PostgreSQL, on a free
port: every database name is passed through, so pytest-django's test databases work."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from scripts.os_tools import tool_location
from tests.processes import wait_until
from tests.redis_servers import free_port


def pgbouncer_binary() -> str | None:
    # Where `make test`'s check finds it (scripts/os_tools.py): PATH, then the system
    # folders (Debian's is /usr/sbin/pgbouncer, off a user's PATH).
    return tool_location("pgbouncer")


@dataclass
class PgBouncer:
    port: int
    directory: Path
    process: subprocess.Popen

    @property
    def log_path(self) -> Path:
        return self.directory / "pgbouncer.log"

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def url(self, database: str, *, user: str = "postgres") -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"


@contextlib.contextmanager
def pgbouncer(
    *, upstream_host: str, upstream_port: int, user: str = "postgres", pool_size: int = 4
) -> Iterator[PgBouncer]:
    """Transaction pooling with a small pool: many clients share few server connections, so
    anything that leans on session state (a prepared statement, a server-side cursor, an
    advisory lock) meets another client's connection and fails."""
    binary = pgbouncer_binary()
    assert binary, "pgbouncer is not installed (Debian package pgbouncer)"
    directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    port = free_port()
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = host={upstream_host} port={upstream_port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {directory / 'users.txt'}",
                f"admin_users = {user}",
                "pool_mode = transaction",
                f"default_pool_size = {pool_size}",
                "max_client_conn = 1000",
                # Idle server connections go soon: a test database can then be dropped.
                "server_idle_timeout = 2",
                "server_reset_query =",
                "ignore_startup_parameters = extra_float_digits,options",
                "log_connections = 1",
                "log_disconnections = 0",
                f"logfile = {directory / 'pgbouncer.log'}",
                f"pidfile = {directory / 'pgbouncer.pid'}",
                "",
            ]
        )
    )
    argv = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root.
        os.chmod(directory, 0o777)
        argv[1:1] = ["-u", "nobody"]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    bouncer = PgBouncer(port=port, directory=directory, process=process)

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"pgbouncer exited:\n{bouncer.log()}")
        try:
            with psycopg.connect(bouncer.url("postgres"), connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    try:
        wait_until(answers, timeout=20, interval=0.2, message="pgbouncer to answer")
        yield bouncer
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
