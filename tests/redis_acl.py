"""Private Redis servers started the way compose and Kubernetes start theirs: through
deploy/redis/start-redis.sh with the shipped ACL rules and a password per user (plus, for the
test only, an `admin` user that may read the ACL log of refusals)."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.processes import ROOT, wait_until
from tests.redis_servers import free_port

REDIS_DIR = ROOT / "deploy" / "redis"
ADMIN = "admin"
ADMIN_RULES = f"user {ADMIN} resetkeys resetchannels nocommands +ping +acl|log +acl|whoami"


@dataclass
class AclRedis:
    port: int
    passwords: dict[str, str]
    directory: Path
    process: subprocess.Popen
    users: list[str] = field(default_factory=list)

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, user: str | None = None, **options) -> redis.Redis:
        credentials = {} if user is None else {"username": user, "password": self.passwords[user]}
        return redis.Redis(
            port=self.port, socket_timeout=5, decode_responses=True, **credentials, **options
        )

    def refusals(self) -> list[dict]:
        """The ACL log: every command, key or channel refused to any user since the start."""
        return self.client(ADMIN).acl_log()

    def log(self) -> str:
        text = ""
        for name in ("start.err", "server.log"):
            with contextlib.suppress(FileNotFoundError):
                text += (self.directory / name).read_text(errors="replace")[-3000:]
        return text


def shipped_users(rules: str) -> list[str]:
    return [
        line.split()[1]
        for line in (REDIS_DIR / rules).read_text().splitlines()
        if line.startswith("user ")
    ]


@contextlib.contextmanager
def acl_redis(rules: str, *, passwords: dict[str, str] | None = None) -> Iterator[AclRedis]:
    """redis-server started by start-redis.sh with `rules` (queue.acl, live-logs.acl) and a
    random password for each of its users (or `passwords`)."""
    directory = Path(tempfile.mkdtemp(prefix="redis-acl-"))
    users = shipped_users(rules)
    passwords = dict(passwords or {user: secrets.token_urlsafe(18) for user in users})
    passwords[ADMIN] = secrets.token_urlsafe(18)
    # The shipped rules verbatim, and the test's reader of the refusals.
    rules_file = directory / rules
    rules_file.write_text((REDIS_DIR / rules).read_text() + ADMIN_RULES + "\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "REDIS_ACL_RULES": str(rules_file),
        "REDIS_ACL_DIR": str(directory / "acl"),
    }
    env |= {f"REDIS_{user.upper()}_PASSWORD": password for user, password in passwords.items()}
    port = free_port()
    process = subprocess.Popen(
        [
            "sh",
            str(REDIS_DIR / "start-redis.sh"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "server.log"),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(directory / "start.err").open("wb"),
    )
    server = AclRedis(
        port=port, passwords=passwords, directory=directory, process=process, users=users
    )

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"start-redis.sh exited ({process.returncode}):\n{server.log()}")
        try:
            return bool(server.client(ADMIN).ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answers, timeout=20, message=f"redis-server with {rules}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
