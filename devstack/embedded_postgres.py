"""The embedded PostgreSQL of `make run`: PostgreSQL 16 from the `pgserver` wheel, data under
var/postgres/, listening on 127.0.0.1 only, stopped with the stack.

The wheel's own Python wrapper is not used: it shares one server between processes through
an atexit reference count and, as root, opens every folder above the data directory to
everyone. Here the stack owns the server like any other child: `postgres` runs in its own
session, and a SIGINT (PostgreSQL's fast shutdown) stops it.

PostgreSQL refuses to run as root. Started by root (a container, CI), the server runs as the
system user RUN_AS_USER (created on first use), which owns the data directory; a folder above
it that others may not enter gets the search bit (o+x: enter, not list) and runstack says which.

The superuser has a password (generated once, kept in var/postgres/password, readable by
whoever started the stack only): another local user reaching 127.0.0.1 gets nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import secrets
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg

RUN_AS_USER = "scheduler-postgres"
SUPERUSER = "postgres"
DATABASE = "scheduler"
START_SECONDS = 60.0
STOP_SECONDS = 30.0


@dataclass
class EmbeddedPostgres:
    process: subprocess.Popen
    port: int
    password: str
    data_dir: Path
    made_reachable: list[Path] = field(default_factory=list)

    def url(self, database: str = DATABASE) -> str:
        return f"postgres://{SUPERUSER}:{quote(self.password)}@127.0.0.1:{self.port}/{database}"


def binaries() -> Path:
    """The bin/ folder of the wheel's PostgreSQL (found without importing the wrapper)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "the pgserver package is missing (it ships the embedded PostgreSQL): "
            "pip install -r requirements.txt, or set DATABASE_URL to a PostgreSQL of yours"
        )
    return Path(spec.origin).parent / "pginstall" / "bin"


@dataclass(frozen=True)
class _Account:
    uid: int
    gid: int


def _server_account() -> _Account | None:
    """The unprivileged account the server runs as; None when we are not root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(RUN_AS_USER)
    except KeyError:
        # Two stacks starting at once may both try; the loser finds the winner's account.
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                RUN_AS_USER,
            ],
            check=False,
            capture_output=True,
        )
        entry = pwd.getpwnam(RUN_AS_USER)
    return _Account(uid=entry.pw_uid, gid=entry.pw_gid)


def _make_reachable(path: Path) -> list[Path]:
    """Give every folder above `path` the search bit for others (enter, not list)."""
    changed = []
    for folder in reversed(path.resolve().parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
            changed.append(folder)
    return changed


def _as_server(account: _Account | None) -> dict[str, object]:
    if account is None:
        return {}
    return {"user": account.uid, "group": account.gid, "extra_groups": []}


def _chown_tree(path: Path, account: _Account) -> None:
    for folder, _dirs, files in os.walk(path):
        os.chown(folder, account.uid, account.gid)
        for name in files:
            os.chown(os.path.join(folder, name), account.uid, account.gid)


def _password(root: Path) -> str:
    path = root / "password"
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(24)
    path.touch(mode=0o600)
    path.write_text(password + "\n")
    return password


def _initdb(bin_dir: Path, data_dir: Path, password: str, account: _Account | None) -> None:
    pwfile = data_dir.parent / ".initdb-password"
    pwfile.touch(mode=0o600)
    pwfile.write_text(password + "\n")
    if account is not None:
        os.chown(pwfile, account.uid, account.gid)
    try:
        result = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
            ],
            cwd=data_dir.parent,
            capture_output=True,
            text=True,
            check=False,
            **_as_server(account),
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise RuntimeError(f"initdb failed:\n{result.stdout}\n{result.stderr}")


def _stop_leftover(data_dir: Path) -> None:
    """A server a killed stack left running on this data directory: stop it first (a second
    postmaster would refuse the data directory anyway)."""
    # Local: needed only by `make run`'s embedded services, not by the server processes.
    import psutil  # noqa: PLC0415

    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return
    with contextlib.suppress(ValueError, OSError):
        pid = int(pid_file.read_text().splitlines()[0])
        process = psutil.Process(pid)
        if process.name() == "postgres" and str(data_dir) in " ".join(process.cmdline()):
            process.send_signal(signal.SIGINT)
            process.wait(STOP_SECONDS)


def start(*, var_dir: Path, port: int, log_path: Path) -> EmbeddedPostgres:
    """Initialise var/postgres/data on first use, start the server and make sure the
    scheduler's database exists. The caller stops it with `stop()`."""

    bin_dir = binaries()
    root = var_dir / "postgres"
    data_dir = root / "data"
    root.mkdir(parents=True, exist_ok=True)
    account = _server_account()
    made_reachable: list[Path] = []
    if account is not None:
        made_reachable = _make_reachable(root) + _make_reachable(bin_dir)
        root.chmod(root.stat().st_mode | stat.S_IXOTH)
    password = _password(root)
    data_dir.mkdir(mode=0o700, exist_ok=True)
    if account is not None and data_dir.stat().st_uid != account.uid:
        _chown_tree(data_dir, account)
    if not (data_dir / "PG_VERSION").exists():
        _initdb(bin_dir, data_dir, password, account)
    _stop_leftover(data_dir)
    log = log_path.open("ab")
    process = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(data_dir),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            # TCP only: no socket file in /tmp or /run to collide with another server's.
            "-c",
            "unix_socket_directories=",
        ],
        cwd=data_dir,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        # Own session: the stack stops it (and only it) with one signal to its group.
        start_new_session=True,
        **_as_server(account),
    )
    server = EmbeddedPostgres(
        process=process,
        port=port,
        password=password,
        data_dir=data_dir,
        made_reachable=made_reachable,
    )
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            with psycopg.connect(
                server.url("postgres"), connect_timeout=3, autocommit=True
            ) as connection:
                exists = connection.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]
                ).fetchone()
                if exists is None:
                    connection.execute(f'CREATE DATABASE "{DATABASE}"')
            return server
        except psycopg.OperationalError as error:
            if process.poll() is not None or time.monotonic() > deadline:
                stop(server)
                raise RuntimeError(
                    f"the embedded PostgreSQL did not start ({error}); see {log_path}"
                ) from None
            time.sleep(0.2)


def stop(server: EmbeddedPostgres) -> None:
    """Fast shutdown (SIGINT: roll back open transactions, checkpoint, exit)."""
    if server.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            server.process.send_signal(signal.SIGINT)
    try:
        server.process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait()
