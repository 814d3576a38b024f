"""Shared plumbing for scenarios: a fresh benchmark database and Redis db, bulk task rows,
real beat processes, and sampling a Redis queue's length over time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
# The benchmark's own database: created and migrated by the first scenario of a run,
# dropped when the run ends (`database_drop`).
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sched_bench"
)
_ready = False


def setup() -> None:
    """Django on bench.settings, with the benchmark database created and migrated once."""
    global _ready
    if _ready:
        return
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import bench.settings  # noqa: F401  (sets DATABASE_URL / REDIS_URL before Django reads them)

    _create_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    _ready = True


def _create_database(url: str) -> None:
    import psycopg

    name, admin_url = _database_name_and_admin_url(url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def database_drop() -> None:
    """Drop the benchmark database (a run leaves nothing behind); a missing one is fine."""
    import psycopg

    name, admin_url = _database_name_and_admin_url(DATABASE_URL)
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error as error:
        print(f"could not drop the benchmark database {name}: {error}", file=sys.stderr)


def _database_name_and_admin_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    return parsed.path.lstrip("/"), url.replace(parsed.path, "/postgres")


def redis():
    import redis as redis_lib

    return redis_lib.Redis.from_url(os.environ["REDIS_URL"])


def reset() -> None:
    """Empty the scheduling tables and the benchmark's Redis db."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduler_app_taskexecution, scheduler_app_executionlog, "
            "django_celery_beat_periodictask, django_celery_beat_intervalschedule, "
            "django_celery_beat_crontabschedule CASCADE"
        )
        cursor.execute("DELETE FROM scheduler_app_taskdefinition")
        cursor.execute("VACUUM ANALYZE scheduler_app_taskexecution")
    redis().flushdb()


def bench_tenant():
    """The bench's tenant, made as an operator makes one (`tenant_create`: its defaults)."""
    from scheduler_app.models import Tenant
    from scheduler_app.services.tenants import tenant_create

    tenant = Tenant.objects.filter(slug="bench").first()
    return tenant if tenant is not None else tenant_create(slug="bench", name="bench")


def tasks_create(count: int, *, spec: dict, prefix: str = "t") -> list:
    """``count`` tasks as the API makes them: the first through the task service
    (`task_create`, what POST /api/v1/tasks/ calls, with the API's defaults), the others
    bulk-copied from it with only their id and name changed (tests/bench/
    test_stack_defaults.py checks a copy against a task made through the API). They share
    the first's creation instant, so an interval schedule's fires are all due together."""
    from scheduler_app.models import TaskDefinition
    from scheduler_app.services.task_definitions import task_create

    first = task_create(tenant=bench_tenant(), spec={**spec, "name": f"{prefix}0"})
    copies = [task_copy(first, name=f"{prefix}{index}") for index in range(1, count)]
    for start in range(0, len(copies), 5000):
        TaskDefinition.objects.bulk_create(copies[start : start + 5000])
    return [first, *copies]


def task_copy(task, *, name: str):
    """A task definition identical to ``task`` but for its id and name (not saved)."""
    from scheduler_app.models import TaskDefinition

    fields = {
        field.attname: getattr(task, field.attname)
        for field in TaskDefinition._meta.concrete_fields
        if field.attname not in ("id", "name")
    }
    return TaskDefinition(id=uuid.uuid4(), name=name, **fields)


def tasks_bulk_create(
    count: int,
    *,
    schedule_type: str,
    expression: Callable[[int], str],
    next_fire_at: Callable[[int], datetime | None],
    prefix: str = "t",
    **fields,
) -> None:
    """Insert task definitions directly (bulk_create in chunks): the services validate one at
    a time, which is not what is being measured here."""
    from django.utils import timezone

    from scheduler_app.models import TaskDefinition

    tenant = bench_tenant()
    now = timezone.now()
    chunk: list[TaskDefinition] = []
    for index in range(count):
        chunk.append(
            TaskDefinition(
                id=uuid.uuid4(),
                tenant=tenant,
                name=f"{prefix}{index}",
                schedule_type=schedule_type,
                schedule_expression=expression(index),
                handler_type="python",
                handler_config={"type": "python", "callable": "noop"},
                created_at=now,
                changed_at=now,
                next_fire_at=next_fire_at(index),
                **fields,
            )
        )
        if len(chunk) == 5000:
            TaskDefinition.objects.bulk_create(chunk)
            chunk = []
    if chunk:
        TaskDefinition.objects.bulk_create(chunk)


def service_env(**extra: str | None) -> dict[str, str]:
    """The environment of a process a bench starts; an ``extra`` of None unsets the name
    (bench/stack_defaults.py: the product's own default, not the bench's)."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="bench.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        CELERY_SEND_EVENTS="false",
    )
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def spawn(
    argv: list[str],
    *,
    log_name: str,
    prefix: list[str] | None = None,
    python: str | None = None,
    **env: str | None,
) -> subprocess.Popen:
    """`python argv...` in its own session, its output in bench/results/logs/LOG_NAME.log;
    ``prefix``: a command that execs it (setpriv, to run it as another user); ``python``:
    another interpreter than this one."""
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"{log_name}.log").open("w")
    return subprocess.Popen(
        [*(prefix or []), python or sys.executable, *argv],
        cwd=ROOT,
        env=service_env(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(process: subprocess.Popen, *, kill: bool = False) -> None:
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def sample_queue(
    keys: list[str],
    *,
    expected: int,
    start_at: float,
    timeout: float,
    interval: float = 0.02,
    process: subprocess.Popen | None = None,
) -> tuple[int, float | None, float | None]:
    """Poll the total length of `keys` until it reaches `expected` or `timeout` seconds after
    `start_at` (wall clock). Returns (count, seconds to first message, seconds to last)."""
    client = redis()
    first = last = None
    count = 0
    while True:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        total = sum(pipe.execute())
        now = time.time()
        if total and first is None:
            first = now - start_at
        if total > count:
            count, last = total, now - start_at
        if count >= expected or now - start_at > timeout:
            return count, first, last
        if process is not None and process.poll() is not None and now > start_at:
            return count, first, last
        time.sleep(interval)


def tasks_copy(
    count: int,
    *,
    row: Callable[[int], tuple[str, str, str, datetime | None]],
    created_at: datetime,
) -> None:
    """COPY `count` task definitions in (a million in well under a minute).
    `row(i)` gives (schedule_type, expression, timezone, next_fire_at)."""
    from django.db import connection

    from scheduler_app.models import TaskDefinition

    tenant = bench_tenant()
    columns = (
        "id, tenant_id, name, description, schedule_type, schedule_expression, timezone, "
        "handler_type, handler_config, parameters, timeout_seconds, max_attempts, backoff, "
        "base_delay_seconds, max_delay_seconds, priority, enabled, paused, tags, notifications, "
        "catchup, overlap, jitter_seconds, next_fire_at, created_at, updated_at, changed_at"
    )
    handler = '{"type": "python", "callable": "noop"}'
    from django.db import transaction

    sql = f"COPY {TaskDefinition._meta.db_table} ({columns}) FROM STDIN"
    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
        for index in range(count):
            schedule_type, expression, zone, next_fire_at = row(index)
            copy.write_row(
                (
                    uuid.uuid4(),
                    tenant.id,
                    f"s{index}",
                    "",
                    schedule_type,
                    expression,
                    zone,
                    "python",
                    handler,
                    "{}",
                    300,
                    3,
                    "exponential",
                    10.0,
                    3600.0,
                    5,
                    True,
                    False,
                    "[]",
                    "{}",
                    "latest",
                    "allow",
                    0,
                    next_fire_at,
                    created_at,
                    created_at,
                    created_at,
                )
            )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TaskDefinition._meta.db_table}")


def is_full(args: list[str]) -> bool:
    """`python -m bench full` (make bench-full) or `--full` on a named scenario."""
    import sys

    return "--full" in args or sys.argv[1:2] == ["full"]


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (all cores, kernel threads
    included: a sandbox's namespaces are partly set up and torn down by kernel workers that
    no process is charged for)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def rate_held(measured: dict, *, p99_limit_ms: float) -> bool:
    """A sustained step held its rate: p99 schedule-to-start within the limit, no fire lost,
    doubled or left unrun (the row keys `bench sustained` reports)."""
    p99 = measured["p99_ms"]
    return (
        isinstance(p99, float)
        and p99 <= p99_limit_ms
        and measured["lost"] == 0
        and measured["duplicates"] == 0
        and measured["not_run"] == 0
    )
