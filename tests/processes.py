"""Real Celery worker and beat processes for integration tests."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float,
    interval: float = 0.1,
    message: str = "condition",
) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def database_url() -> str:
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or "5432"
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


@contextlib.contextmanager
def broker_key_prefix(prefix: str):
    """Broker queues under `prefix` for this process and the processes it starts meanwhile
    (they inherit BROKER_KEY_PREFIX): this process publishes through a Celery connection with
    the same `global_keyprefix`, and a worker started with the prefix reads only those
    queues. The previous prefix is back on exit."""
    from project.celery import app

    previous_env = os.environ.get("BROKER_KEY_PREFIX")
    previous_options = dict(app.conf.broker_transport_options or {})

    def use(options: dict) -> None:
        # Drop (not close) the cached pools: kombu's global producer pools still hold them.
        app._pool = None
        app.amqp._producer_pool = None
        app.conf.broker_transport_options = options

    os.environ["BROKER_KEY_PREFIX"] = prefix
    use({**previous_options, "global_keyprefix": prefix})
    try:
        yield prefix
    finally:
        use(previous_options)
        if previous_env is None:
            os.environ.pop("BROKER_KEY_PREFIX", None)
        else:
            os.environ["BROKER_KEY_PREFIX"] = previous_env


def service_env(**overrides: str) -> dict[str, str]:
    """The environment a worker or beat needs to share this test's database and Redis."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DJANGO_")) and key != "SCHEDULER_TEST_RUN_ID"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        LIVE_LOGS_REDIS_URL=settings.LIVE_LOGS_REDIS_URL,
        SCHEDULER_REDIS_PREFIX=settings.SCHEDULER["REDIS_KEY_PREFIX"],
        CELERY_SEND_EVENTS="false",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="INFO",
        # No retention or statistics runs handed out by test beats (they would scan and
        # lock the executions table under other tests); tests/data_lifecycle calls them directly.
        RETENTION_RUN_SECONDS="0",
        STATS_REFRESH_SECONDS="0",
        # The retry budget's counters are per minute under the session's Redis prefix, which
        # every test and every process it starts share; the test settings lift its floor
        # because the tests fail many runs a minute. A started worker judges a retry by the
        # same floor: with the production one (10 a minute) it deferred a test's retry to the
        # next minute once earlier tests had spent this one's (a whole-suite flake).
        RETRY_BUDGET_MIN_PER_MINUTE=str(settings.FLEET["RETRY_BUDGET_MIN_PER_MINUTE"]),
    )
    env.update(overrides)
    return env


@dataclass
class ServiceProcess:
    name: str
    process: subprocess.Popen
    log_path: Path
    extra: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a prefork worker's children included)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 15) -> None:
        if not self.alive():
            return
        self.kill(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.process.wait(timeout=10)

    def wait_for_log(self, needle: str, timeout: float = 30) -> None:
        wait_until(
            lambda: needle in self.log() or not self.alive(),
            timeout=timeout,
            message=f"{self.name} to log {needle!r}",
        )
        if not self.alive():
            raise AssertionError(f"{self.name} exited early:\n{self.log()[-4000:]}")


def stop_all(processes: Iterable[ServiceProcess], timeout: float = 15) -> None:
    """Stop them side by side: each is asked (SIGTERM) before any is waited for, so that their
    graceful shutdowns (a prefork worker's takes seconds) overlap."""
    asked = [process for process in processes if process.alive()]
    for process in asked:
        process.kill(signal.SIGTERM)  # once: a second SIGTERM would cut a warm shutdown short
    deadline = time.monotonic() + timeout
    for process in asked:
        try:
            process.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill(signal.SIGKILL)
            process.process.wait(timeout=10)


@functools.cache
def _logs() -> tempfile.TemporaryDirectory:
    """This test process's folder of service logs, removed when the process exits (a failed
    test prints the logs it needs before then)."""
    return tempfile.TemporaryDirectory(prefix="scheduler-test-logs-")


def service_logs_folder() -> Path:
    """Where every process this test process started logs (replaced ones' logs stay)."""
    return Path(_logs().name)


def _start(name: str, argv: list[str], env: dict[str, str]) -> ServiceProcess:
    # Not a context manager: the child inherits the handle and keeps writing after we return.
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix=f"{name}-", suffix=".log", delete=False, dir=_logs().name
    )
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log_file.close()
    return ServiceProcess(name=name, process=process, log_path=Path(log_file.name))


def start_worker(
    *,
    name: str,
    queues: str = "critical,normal,bulk",
    concurrency: int = 4,
    env_overrides: dict[str, str] | None = None,
    wait: bool = True,
) -> ServiceProcess:
    run = os.environ.get("SCHEDULER_TEST_RUN_ID", "run")
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "-P",
        "prefork",
        "-n",
        f"{name}-{run}@%h",
        "-l",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    worker = _start(name, argv, service_env(**(env_overrides or {})))
    if wait:
        worker.wait_for_log("ready.", timeout=60)
    return worker


def start_beat(*, node_id: str, env_overrides: dict[str, str] | None = None) -> ServiceProcess:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "beat",
        "-S",
        "beat:LeaderScheduler",
        "-l",
        "INFO",
    ]
    env = service_env(SCHEDULER_NODE_ID=node_id, **(env_overrides or {}))
    return _start(f"beat-{node_id}", argv, env)


def beat_tick_started_after(node_id: str, moment: float) -> bool:
    """Has the beat `node_id` begun a tick after `moment` (epoch seconds), by its status in
    Redis (beat/status.py)? What a test waits for to know the beat has looked
    again: a fire or a release it did not make by then it does not make."""
    import json

    from scheduler_app.redis_client import get_redis, redis_key

    raw = get_redis().get(redis_key(f"scheduler:node:{node_id}"))
    if not raw:
        return False
    status = json.loads(raw)
    return (status["last_tick_at"] or 0) - status["last_tick_seconds"] > moment


def wait_for_beat_tick(node_id: str, *, after: float, timeout: float = 30) -> None:
    """Until the beat `node_id` has begun a tick after `after` (epoch seconds)."""
    wait_until(
        lambda: beat_tick_started_after(node_id, after),
        timeout=timeout,
        interval=0.05,
        message=f"beat {node_id} to tick after {after:.2f}",
    )


def unique_sleep_seconds() -> str:
    """A `sleep` argument no other process on the machine has: tests find the processes a
    sandboxed task started by it (pids inside a sandbox mean nothing outside)."""
    import random

    return f"{random.randint(500, 900)}.{random.randint(10**6, 10**7)}"


def host_pids_running(marker: str) -> list[int]:
    """Live (non-zombie) `sleep <marker>` processes on this host, wherever they run."""
    found = []
    wanted = f"sleep\0{marker}\0".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        is_sleep = cmdline.split(b"\0")[0].endswith(b"sleep")
        if is_sleep and cmdline.endswith(wanted) and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def start_web(*, env_overrides: dict[str, str] | None = None, workers: int = 1) -> ServiceProcess:
    """The web tier exactly as `make run`, the image and compose run it (gunicorn with
    uvicorn workers, project/gunicorn_conf.py) on a free port; `.extra["url"]` is its root."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--config",
        "python:project.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "project.asgi:application",
    ]
    web = _start("web", argv, service_env(**(env_overrides or {})))
    web.extra["url"] = f"http://127.0.0.1:{port}"
    web.wait_for_log("Application startup complete", timeout=60)
    return web


def quiesce(prefix: str, timeout: float = 30.0) -> None:
    """After a test that used a worker reading under `prefix`: drop what it left queued there
    and wait until the worker has finished what it holds, so the worker writes nothing while
    the tables are flushed (a flood test's leftovers deadlocked the flush once, in CI)."""
    import redis

    from scheduler_app.models import TaskExecution

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=500):
            if client.type(key) == b"list":  # the queues; the bindings (sets) stay
                client.delete(key)
    finally:
        client.close()
    # Messages the worker already prefetched then find their runs over and do nothing: a
    # claim takes only a pending or queued run, so from here on no run starts, and the
    # worker's database writes are over once no run is running (a run's end writes in the
    # transaction that ends it; its Redis books go after). Seen idle three polls in a row.
    TaskExecution.platform.filter(status__in=["pending", "queued"]).update(status="cancelled")
    deadline = time.monotonic() + timeout
    idle_polls = 0
    while time.monotonic() < deadline and idle_polls < 3:
        running = TaskExecution.platform.filter(status="running").exists()
        idle_polls = 0 if running else idle_polls + 1
        time.sleep(0.1)
