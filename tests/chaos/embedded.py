"""A chaos stack on a PostgreSQL of its own, so that a case can stop and start the server.

The server is the embedded PostgreSQL of `make run` (devstack.embedded_postgres), started
by the test on a free port in a temporary var dir. The beats and workers reach it through
DATABASE_URL. This test process's own Django connection stays on the test database, so the
stack's tenant and tasks are made, and its tasks paused, by a short Django process on the
embedded database (tests/chaos/embedded_manage.py, through the services as production
does), and its runs are read with psycopg.

The server starts with the test database's migrated schema (pg_dump of its schema and of its
migration records, into psql), not migrated from scratch: seventy-odd migrations took most of
the case's setup, and they are not what the case is about (a server stopped and started).
The setup's `migrate` then finds nothing to apply and makes Django's own rows
(content types, permissions) as a migrate from scratch does.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg.rows import namedtuple_row

from devstack import embedded_postgres
from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import ExecutionLoss, TaskExecution
from tests.chaos.harness import ChaosStack, stack_env
from tests.processes import ROOT, database_url, service_env, stop_all
from tests.redis_servers import new_server, queue_server_args

SETUP_SECONDS = 180


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class EmbeddedDatabase:
    var_dir: Path
    log_path: Path
    port: int
    server: embedded_postgres.EmbeddedPostgres | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url()

    def start(self) -> None:
        """Start the server (again): the same port, the same data."""
        self.server = embedded_postgres.start(
            var_dir=self.var_dir, port=self.port, log_path=self.log_path
        )

    def stop(self) -> None:
        """Fast shutdown: open transactions rolled back, every session cut; returns once the
        server is gone (a start on the same data before that fails on its lock file, as it
        did on a loaded machine)."""
        if self.server is not None:
            embedded_postgres.stop(self.server)
            self.server.process.wait(timeout=120)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def query(self, sql: str, params: list) -> list:
        # A connection per query: the server may have restarted since the last one.
        with psycopg.connect(self.url, connect_timeout=5, row_factory=namedtuple_row) as conn:
            return conn.execute(sql, params).fetchall()


@dataclass
class EmbeddedChaosStack(ChaosStack):
    """A ChaosStack whose runs live in `database`; `tasks` holds the tasks' ids."""

    database: EmbeddedDatabase | None = None

    def _runs(self, where: str = "", params: tuple = ()) -> list:
        assert self.database is not None
        table = TaskExecution._meta.db_table
        return self.database.query(
            f"SELECT id, task_id, scheduled_at, attempt, status, started_at FROM {table} "
            f"WHERE task_id = ANY(%s::uuid[]) {where}",
            [self.tasks, *params],
        )

    def executions(self):
        raise NotImplementedError("this stack's runs are in the embedded database: _runs()")

    def succeeded_after(self, moment: datetime) -> int:
        return len(self._runs("AND status = 'success' AND scheduled_at > %s", (moment,)))

    def pause_tasks(self) -> None:
        _manage(self.env, "pause", *self.tasks)

    def open_runs(self) -> bool:
        return bool(self._runs("AND NOT status = ANY(%s)", (list(TERMINAL_STATUSES),)))

    def execution_rows(self) -> list:
        return self._runs()

    def claims_of(self, executions: list) -> dict[str, int]:
        table = ExecutionLoss._meta.db_table
        rows = self.database.query(
            f"SELECT execution_id, count(*) FROM {table} WHERE outcome = 'requeued' "
            "AND execution_id = ANY(%s::uuid[]) GROUP BY execution_id",
            [[str(e.id) for e in executions]],
        )
        return {str(row[0]): 1 + int(row[1]) for row in rows}


def _copy_migrated_schema(target_url: str) -> None:
    """The test database's schema and its migration records into `target_url`'s database:
    what `migrate` from scratch would build there (the test database is migrated from the
    same files, tests/db_template.py), in seconds instead of a migrate's minute. Without a
    pg_dump of the test server's version (16's misreads a 15's column options), and its psql
    (the dump's `\\restrict` lines are newer than the embedded server's psql), nothing is
    copied and the setup migrates from scratch."""
    source = database_url()
    with psycopg.connect(source, connect_timeout=5) as conn:
        major = conn.info.server_version // 10000
    tools = Path(f"/usr/lib/postgresql/{major}/bin")
    pg_dump, psql = tools / "pg_dump", tools / "psql"
    if not (pg_dump.exists() and psql.exists()):
        return
    schema = _dump(pg_dump, source, "--schema-only")
    records = _dump(pg_dump, source, "--data-only", "--table=django_migrations")
    restored = subprocess.run(
        [str(psql), "-q", "-v", "ON_ERROR_STOP=1", target_url],
        input=schema + records,
        capture_output=True,
        check=False,
        timeout=SETUP_SECONDS,
    )
    if restored.returncode != 0:
        raise AssertionError(f"the schema did not restore:\n{restored.stderr.decode()}")


def _dump(pg_dump: Path, source: str, *options: str) -> bytes:
    return subprocess.run(
        [str(pg_dump), "--no-owner", "--no-privileges", *options, source],
        capture_output=True,
        check=True,
        timeout=SETUP_SECONDS,
    ).stdout


def _manage(env: dict[str, str], *argv: str) -> str:
    """tests/chaos/embedded_manage.py in a Django process on the stack's database."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.chaos.embedded_manage", *argv],
        cwd=ROOT,
        env=service_env(**env),
        capture_output=True,
        text=True,
        timeout=SETUP_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"{argv[0]} on the embedded database failed:\n{result.stderr}")
    return result.stdout


@contextlib.contextmanager
def embedded_chaos_stack(
    tmp_path: Path, settings, *, tasks: int = 1, handler_seconds: float = 0.0
) -> Iterator[EmbeddedChaosStack]:
    """A private Redis, an embedded PostgreSQL with the migrated schema, and `tasks`
    one-second ledger tasks in it; the case starts the processes."""
    redis = new_server(*queue_server_args()).start()
    settings.REDIS_URL = redis.url
    database = EmbeddedDatabase(
        var_dir=tmp_path / "var", log_path=tmp_path / "postgres.log", port=_free_port()
    )
    ledger = tmp_path / "ledger.txt"
    stack = None
    try:
        database.start()
        _copy_migrated_schema(database.url)
        env = {**stack_env(redis), "DATABASE_URL": database.url}
        created = json.loads(
            _manage(env, "setup", str(ledger), str(tasks), str(handler_seconds)).splitlines()[-1]
        )
        stack = EmbeddedChaosStack(
            tenant=None, redis=redis, ledger=ledger, tasks=created, env=env, database=database
        )
        yield stack
    except BaseException:
        if stack is not None:
            print(stack.logs())
        print(redis.log())
        print(database.log()[-5000:])
        raise
    finally:
        if stack is not None:
            stack.supervisor.stop_watching()
            stop_all(stack.processes(), timeout=10)
        redis.stop()
        database.stop()
