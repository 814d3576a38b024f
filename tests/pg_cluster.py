"""A PostgreSQL primary and its streaming hot standby, on free ports in a temporary folder,
for the disaster-recovery drill, the partition case and the nemesis.

Debian's PostgreSQL 15 binaries (/usr/lib/postgresql/15/bin): ``initdb`` the primary,
``pg_basebackup`` the standby from it, each started with ``postgres`` directly (no pg_ctl
daemon in between: the test owns the processes and can SIGKILL one). The standby streams
from the primary through a `TcpProxy` (tests/tcp_proxy.py), so a test can cut and heal the
replication link without touching the clients' connections. Synchronous replication is on by
default (``synchronous_standby_names`` naming the standby): a commit is acknowledged only once
the standby has it, which is what makes a promotion lose nothing (RPO zero).

    with pg_cluster() as cluster:
        cluster.url("app")            # postgres://...@primary,standby/app?target_session_attrs=read-write
        cluster.kill_primary()        # SIGKILL, the postmaster and every backend
        cluster.promote()             # the standby takes writes
        cluster.pause_replay(); cluster.resume_replay()
        cluster.cut_replication(); cluster.heal_replication()

As root (a container, CI) the servers run as the `postgres` system account, which PostgreSQL
requires; the folder is handed to it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.processes import wait_until
from tests.redis_servers import free_port
from tests.tcp_proxy import TcpProxy

BINARIES = Path("/usr/lib/postgresql/15/bin")
SUPERUSER = "postgres"
STANDBY_NAME = "standby"
# Fast and small: a test cluster, on a machine whose OS cache survives a SIGKILL of the
# server (so fsync off loses nothing a process crash could lose).
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "120",
    "wal_keep_size": "'256MB'",
    "hot_standby": "on",
    "hot_standby_feedback": "on",
    "wal_receiver_status_interval": "1",
    "wal_retrieve_retry_interval": "'200ms'",
    "log_min_messages": "warning",
}


def binaries_present() -> bool:
    return all((BINARIES / tool).exists() for tool in ("initdb", "postgres", "pg_basebackup"))


def _server_user() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: as root, the `postgres` account."""
    return pwd.getpwnam(SUPERUSER) if os.geteuid() == 0 else None


@dataclass
class PgNode:
    name: str
    port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None

    def dsn(self, database: str = "postgres") -> str:
        return f"postgres://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def sql(
        self, statement: str, params: tuple | None = None, *, database: str = "postgres"
    ) -> list[tuple]:
        with psycopg.connect(self.dsn(database), autocommit=True, connect_timeout=3) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


@dataclass
class PgCluster:
    primary: PgNode
    standby: PgNode
    link: TcpProxy
    directory: Path
    synchronous: bool
    promoted_at: float | None = None
    killed_at: float | None = None
    _user: pwd.struct_passwd | None = field(default=None, repr=False)

    # -- addresses ------------------------------------------------------------------------
    def url(self, database: str, **params: str) -> str:
        """The multi-host URL the scheduler's processes use: libpq tries the primary, then
        the standby, and keeps the one that accepts writes."""
        query = {"target_session_attrs": "read-write", "connect_timeout": "2", **params}
        options = "&".join(f"{key}={value}" for key, value in query.items())
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgres://{SUPERUSER}@{hosts}/{database}?{options}"

    def replica_url(self, database: str) -> str:
        """The standby alone (DATABASE_REPLICA_URL): reads, possibly behind."""
        return self.standby.dsn(database)

    # -- faults ---------------------------------------------------------------------------
    def kill_primary(self) -> float:
        """SIGKILL the primary's postmaster and every backend of it, as a lost host; returns
        the instant (time.time())."""
        process = self.primary.process
        assert process is not None and process.poll() is None, "the primary is not running"
        children = _children(process.pid)
        self.killed_at = time.time()
        for pid in [process.pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=10)
        return self.killed_at

    def promote(self, *, timeout: float = 30) -> float:
        """Promote the standby (pg_promote(), which waits until it accepts writes); returns
        the instant it does."""
        self.standby.sql("SELECT pg_promote(wait => true, wait_seconds => 30)")
        wait_until(
            lambda: self.standby.sql("SELECT pg_is_in_recovery()") == [(False,)],
            timeout=timeout,
            message="the promoted standby to accept writes",
        )
        self.promoted_at = time.time()
        return self.promoted_at

    def pause_replay(self) -> None:
        """The standby keeps receiving WAL (so synchronous commits still return) but stops
        applying it: its reads go stale."""
        self.standby.sql("SELECT pg_wal_replay_pause()")
        wait_until(
            lambda: self.standby.sql("SELECT pg_get_wal_replay_pause_state()") == [("paused",)],
            timeout=10,
            message="replay to pause",
        )

    def resume_replay(self) -> None:
        self.standby.sql("SELECT pg_wal_replay_resume()")

    def cut_replication(self) -> None:
        """The network between primary and standby is gone: the standby's replication
        connection drops, and it cannot reconnect until `heal_replication`."""
        self.link.cut()

    def heal_replication(self) -> None:
        self.link.heal()

    # -- state ----------------------------------------------------------------------------
    def streaming(self) -> bool:
        """Whether the primary sees the standby streaming (and, synchronous, as `sync`)."""
        rows = self.primary.sql(
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
            (STANDBY_NAME,),
        )
        wanted = "sync" if self.synchronous else "async"
        return bool(rows) and rows[0] == ("streaming", wanted)

    def replay_caught_up(self) -> bool:
        """The standby has applied everything the primary has written."""
        (written,) = self.primary.sql("SELECT pg_current_wal_lsn()::text")[0]
        rows = self.standby.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (written,))
        return rows == [(True,)]

    def create_database_from(self, source_dsn: str, name: str) -> None:
        """A database on the primary holding what `source_dsn`'s holds (schema and rows,
        pg_dump piped to psql): the test database's migrated schema, without migrating."""
        self.primary.sql(f'CREATE DATABASE "{name}"')
        dump = subprocess.run(
            [str(BINARIES / "pg_dump"), "--no-owner", "--no-privileges", source_dsn],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        subprocess.run(
            [str(BINARIES / "psql"), "-q", "-v", "ON_ERROR_STOP=1", self.primary.dsn(name)],
            input=dump,
            capture_output=True,
            check=True,
            timeout=120,
        )

    def stop(self) -> None:
        for node in (self.standby, self.primary):
            if node.alive():
                node.process.send_signal(signal.SIGINT)  # fast shutdown
        for node in (self.standby, self.primary):
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=10)
        self.link.close()


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _run(argv: list[str], user: pwd.struct_passwd | None, **kwargs) -> None:
    subprocess.run(
        argv,
        check=True,
        capture_output=True,
        timeout=120,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        **kwargs,
    )


def _start(node: PgNode, user: pwd.struct_passwd | None) -> None:
    # Not a context manager: the server keeps writing to it after we return.
    log = open(node.log_path, "ab")  # noqa: SIM115
    node.process = subprocess.Popen(
        [str(BINARIES / "postgres"), "-D", str(node.data_dir), "-p", str(node.port)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
    )
    log.close()

    def answers() -> bool:
        if not node.alive():
            raise AssertionError(f"{node.name} exited:\n{node.log()[-3000:]}")
        try:
            node.sql("SELECT 1")
        except psycopg.Error:
            return False
        return True

    wait_until(answers, timeout=60, interval=0.1, message=f"PostgreSQL {node.name} to answer")


def _configure(data_dir: Path, settings: dict[str, str]) -> None:
    with (data_dir / "postgresql.auto.conf").open("a") as conf:
        for key, value in settings.items():
            conf.write(f"{key} = {value}\n")


@contextlib.contextmanager
def pg_cluster(*, synchronous: bool = True) -> Iterator[PgCluster]:
    """Start a primary and its streaming standby (synchronous by default); both stopped and
    their folder removed on exit."""
    assert binaries_present(), f"PostgreSQL 15 binaries missing under {BINARIES}"
    user = _server_user()
    directory = Path(tempfile.mkdtemp(prefix="pg-cluster-"))
    sockets = directory / "sockets"
    sockets.mkdir()
    if user:
        for path in (directory, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
    primary = PgNode("primary", free_port(), directory / "primary", directory / "primary.log")
    standby = PgNode("standby", free_port(), directory / "standby", directory / "standby.log")
    link = TcpProxy(upstream_port=primary.port)
    cluster = PgCluster(primary, standby, link, directory, synchronous, _user=user)
    common = {**SERVER_SETTINGS, "unix_socket_directories": _literal(str(sockets))}
    try:
        _run(
            [
                str(BINARIES / "initdb"),
                "-D",
                str(primary.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            user,
        )
        _configure(primary.data_dir, common)
        if synchronous:
            # Every commit waits for the standby to have it (the application_name of its
            # replication connection): a promotion loses nothing acknowledged.
            _configure(primary.data_dir, {"synchronous_standby_names": _literal(STANDBY_NAME)})
        _start(primary, user)
        _run(
            [
                str(BINARIES / "pg_basebackup"),
                "-D",
                str(standby.data_dir),
                "-d",
                primary.dsn(),
                "-X",
                "stream",
                "--no-sync",
                "--checkpoint=fast",
            ],
            user,
        )
        # Through the proxy: cutting it is a partition between primary and standby.
        conninfo = (
            f"host=127.0.0.1 port={link.port} user={SUPERUSER} "
            f"application_name={STANDBY_NAME} connect_timeout=2"
        )
        _configure(
            standby.data_dir,
            {"synchronous_standby_names": "''", "primary_conninfo": _literal(conninfo)},
        )
        (standby.data_dir / "standby.signal").touch()
        if user:
            os.chown(standby.data_dir / "standby.signal", user.pw_uid, user.pw_gid)
        _start(standby, user)
        wait_until(cluster.streaming, timeout=30, message="the standby to stream")
        yield cluster
    except BaseException:
        print(f"----- primary\n{primary.log()[-3000:]}\n----- standby\n{standby.log()[-3000:]}")
        raise
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def django_default_at(url: str) -> Iterator[None]:
    """This thread's Django `default` connection pointed at `url` (the cluster's multi-host
    URL) for the block: the test writes its data through the services and reads its
    verdicts with the ORM, as it does against the test database, then gets that one back."""
    from django.db import connections

    from project.settings.env import database_from_url

    connection = connections["default"]
    saved = dict(connection.settings_dict)
    target = database_from_url(url)
    connection.close()
    connection.settings_dict.update(
        {key: target[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    )
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
