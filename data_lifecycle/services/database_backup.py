"""Backing up the whole database and restoring it into a fresh one, with PostgreSQL's own
client binaries (`pg_dump`, `pg_restore`). docs/operations/backups.md says why a logical dump
(and not a base backup with WAL archiving) is what `manage.py backup` makes.

A dump is consistent: pg_dump reads every table in one REPEATABLE READ transaction (one
snapshot), so the dump is the database as it was at one instant, whatever the beat and the
workers were writing meanwhile. PostgreSQL is the scheduler's record (ARCHITECTURE §4.1):
the task definitions and their next fires, every run and its attempt, the DAG runs, the
audit log, the secrets (encrypted: SECRETS_KEY is not in the dump and must be kept with it).
Redis holds nothing a restore needs: the runs left queued are rung again by the new leader.

The password never appears on a command line (visible to every user of the host) nor in a
message: the client binaries get it in PGPASSWORD, and their error output is scrubbed of it.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import psycopg
from django.conf import settings
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from scheduler_app.models import AuditEntry

# An environment problem (a client binary missing, the database unreachable): exit code 2,
# as a shell's "misuse" code, so a cron job's alert tells it from a failed dump (1).
EXIT_ENVIRONMENT = 2
EXIT_FAILED = 1
CONNECT_TIMEOUT_SECONDS = 10
# libpq parameters worth passing on from DATABASE_URL's query (sslmode, a multi-host URL's
# target_session_attrs, ...): everything but the password, which goes in PGPASSWORD.
_NOT_PASSED = {"password", "passfile"}


@cache
def _libpq_keywords() -> frozenset[str]:
    # Django's OPTIONS may hold its own keys too (isolation_level, pool): not for libpq.
    return frozenset(option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults())


def _passed(options: dict[str, Any]) -> dict[str, str]:
    return {
        k: str(v) for k, v in options.items() if k in _libpq_keywords() and k not in _NOT_PASSED
    }


class BackupError(Exception):
    """A backup or a restore that could not be made: one message for the operator, and the
    command's exit code."""

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Database:
    """Where one database is, as libpq parameters; the password apart (`repr` hides it)."""

    dbname: str
    host: str = ""
    port: str = ""
    user: str = ""
    password: str = field(default="", repr=False)
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_django(cls, entry: dict[str, Any]) -> Database:
        options = {
            k: str(v) for k, v in (entry.get("OPTIONS") or {}).items() if k not in _NOT_PASSED
        }
        return cls(
            dbname=entry["NAME"],
            host=str(entry.get("HOST") or ""),
            port=str(entry.get("PORT") or ""),
            user=str(entry.get("USER") or ""),
            password=str(entry.get("PASSWORD") or ""),
            options=options,
        )

    @classmethod
    def from_url(cls, url: str) -> Database:
        """postgres://user:password@host:port/dbname?sslmode=... (a restore's target)."""
        parsed = urlparse(url)
        if parsed.scheme not in ("postgres", "postgresql") or not parsed.path.strip("/"):
            raise BackupError("the target must be a postgres://user@host:port/dbname URL")
        query = dict(part.split("=", 1) for part in parsed.query.split("&") if "=" in part)
        return cls(
            dbname=unquote(parsed.path.lstrip("/")),
            host=parsed.hostname or "",
            port=str(parsed.port or ""),
            user=unquote(parsed.username or ""),
            password=unquote(parsed.password or ""),
            options=_passed(query),
        )

    def named(self, dbname: str) -> Database:
        return Database(dbname, self.host, self.port, self.user, self.password, self.options)

    def params(self) -> dict[str, str]:
        """The libpq keywords, without the password."""
        given = {"dbname": self.dbname, "host": self.host, "port": self.port, "user": self.user}
        return {**{k: v for k, v in given.items() if v}, **self.options}

    def conninfo(self) -> str:
        """A libpq keyword/value string for a client binary's --dbname, without the password."""
        return make_conninfo(**self.params())

    def describe(self) -> str:
        """user@host:port/dbname: what a message names (never the password)."""
        where = f"{self.host or 'localhost'}:{self.port or '5432'}"
        return f"{self.user + '@' if self.user else ''}{where}/{self.dbname}"

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
        if self.password:
            env["PGPASSWORD"] = self.password
        return env

    def connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(
                self.conninfo(),
                password=self.password or None,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                autocommit=True,
            )
        except psycopg.Error as error:
            raise BackupError(
                f"cannot reach the database {self.describe()}: {self.scrub(_first_line(error))}",
                exit_code=EXIT_ENVIRONMENT,
            ) from None

    def scrub(self, text: str) -> str:
        return text.replace(self.password, "********") if self.password else text


def default_database() -> Database:
    return Database.from_django(settings.DATABASES["default"])


@dataclass(frozen=True)
class BackupReport:
    path: Path
    size_bytes: int
    seconds: float
    database: str


def database_backup(*, path: Path, source: Database | None = None) -> BackupReport:
    """Dump `source` (the scheduler's database by default) to `path`, pg_dump's custom format
    (compressed; `pg_restore` reads it). Written beside `path` first and renamed when
    complete, so a crash mid-dump never leaves a file that looks like a backup."""
    source = source or default_database()
    started = time.monotonic()
    with source.connect() as connection:
        major = _server_major(connection)
    pg_dump = client_binary("pg_dump", major=major)
    path = path.resolve()
    partial = path.with_name(path.name + ".partial")
    try:
        _run(
            [pg_dump, "--format=custom", f"--file={partial}", f"--dbname={source.conninfo()}"],
            database=source,
            doing="pg_dump",
        )
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    report = BackupReport(
        path=path,
        size_bytes=path.stat().st_size,
        seconds=round(time.monotonic() - started, 2),
        database=source.describe(),
    )
    _audit(
        source,
        action="database.backup",
        detail={"file": str(path), "size_bytes": report.size_bytes, "seconds": report.seconds},
    )
    return report


@dataclass(frozen=True)
class RestoreReport:
    database: str
    seconds: float


def database_restore(*, path: Path, target: Database) -> RestoreReport:
    """Restore the dump at `path` into `target`, a fresh database: created when it does not
    exist, refused when it already holds tables (a restore never merges into live data).
    Owners and grants are not restored: the restoring role owns what it creates."""
    started = time.monotonic()
    if not path.is_file():
        raise BackupError(f"no backup file at {path}")
    with target.named("postgres").connect() as maintenance:
        major = _server_major(maintenance)
        pg_restore = client_binary("pg_restore", major=major)
        _readable_or_refuse(pg_restore, path, target)
        _fresh_database(maintenance, target)
    _run(
        [
            pg_restore,
            "--no-owner",
            "--no-privileges",
            "--exit-on-error",
            "--single-transaction",
            f"--dbname={target.conninfo()}",
            str(path),
        ],
        database=target,
        doing="pg_restore",
    )
    report = RestoreReport(database=target.describe(), seconds=round(time.monotonic() - started, 2))
    _audit(target, action="database.restore", detail={"file": str(path), "seconds": report.seconds})
    return report


def client_binary(name: str, *, major: int) -> str:
    """The client binary for a server of version `major`: POSTGRES_BIN_DIR, then Debian's
    /usr/lib/postgresql/<major>/bin (a pg_dump older than its server refuses to dump it),
    then PATH."""
    candidates = []
    if settings.POSTGRES_BIN_DIR:
        candidates.append(Path(settings.POSTGRES_BIN_DIR) / name)
    candidates.append(Path(f"/usr/lib/postgresql/{major}/bin") / name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise BackupError(
        f"{name} not found (looked in {', '.join(str(c.parent) for c in candidates)} and PATH): "
        f"install postgresql-client-{major}, or set POSTGRES_BIN_DIR",
        exit_code=EXIT_ENVIRONMENT,
    )


def _server_major(connection: psycopg.Connection) -> int:
    return connection.info.server_version // 10000


def _readable_or_refuse(pg_restore: str, path: Path, target: Database) -> None:
    listed = subprocess.run(
        [pg_restore, "--list", str(path)], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        raise BackupError(
            f"{path} is not a backup pg_restore can read: {_last_line(listed.stderr)}"
        )


def _fresh_database(maintenance: psycopg.Connection, target: Database) -> None:
    exists = maintenance.execute(
        "SELECT 1 FROM pg_database WHERE datname = %s", [target.dbname]
    ).fetchone()
    if not exists:
        maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target.dbname)))
        return
    with target.connect() as connection:
        tables = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', "
            "'information_schema')"
        ).fetchone()
    if tables and tables[0]:
        raise BackupError(
            f"the target database {target.describe()} already has {tables[0]} tables: a restore "
            "goes into a fresh database (name a new one, or drop this one first)"
        )


def _run(argv: list[str], *, database: Database, doing: str) -> None:
    done = subprocess.run(
        argv, env=database.client_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BackupError(
            f"{doing} of {database.describe()} failed: {database.scrub(_last_line(done.stderr))}"
        )


def _audit(database: Database, *, action: str, detail: dict[str, Any]) -> None:
    """The audit log entry, in the database backed up or restored (the restored one records
    its own restore). Written through its own connection: the restore's target is not the
    database Django's settings name."""
    table = AuditEntry._meta.db_table
    actor = f"cli:{getpass.getuser()}"
    with database.connect() as connection:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (tenant_id, actor, action, object_type, object_id, detail, "
                "created_at) VALUES (NULL, %s, %s, 'database', %s, %s, now())"
            ).format(sql.Identifier(table)),
            [actor, action, database.dbname[:64], Jsonb({**detail, "via": "cli"})],
        )


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
