"""What one shell run costs on the stack `make run` starts: CPU, log lines, round trips.

    python -m bench.default_stack --rate=100 --seconds=20 [--profile] [--monitor]

The beat and the worker are started with the project's own commands and default settings
(as devstack/localstack.py does: `celery -A project beat -l INFO`, `celery -A project worker
-Q critical,normal,bulk -c 2 -l INFO -n local@%h`; events, gossip, mingle and heartbeat as
shipped); RATE one-second interval tasks with a shell `true` handler are created through the
service the API uses (`task_create`), in a tenant with the default quotas. Over the window:

- CPU seconds per completed run of the worker (and its pool), the sandboxes it reaped,
  the beat, this database's PostgreSQL backends (load-independent, unlike the rates);
- log lines and bytes per run that the beat and the worker wrote;
- with ``--monitor``: Redis commands per run on the benchmark's dbs (MONITOR, by command)
  and SQL statements per run on the benchmark's database (log_statement for that database
  only, read back from the server's log);
- with ``--profile``: py-spy samples of the worker and the beat (bench/profiling.py);
- schedule-to-start p50/p99, lost, doubled, as `bench shell` counts them.

The figures of a run with ``--monitor`` or ``--profile`` are for attribution: MONITOR and
the sampling cost CPU of their own.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bench import support
from devstack.commands import beat_command, worker_command

POSTGRES_LOG = Path("/var/log/postgresql/postgresql-15-main.log")
LOG_DIR = support.ROOT / "bench" / "results" / "logs"
# make run's worker and beat (devstack/commands.py), without the interpreter support.spawn adds.
WORKER_ARGV = worker_command(sys.executable)[1:]
BEAT_ARGV = beat_command(sys.executable)[1:]


def _option(args: list[str], name: str, default: int) -> int:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return int(arg.split("=", 1)[1])
    return default


def _tasks_create(count: int) -> None:
    from scheduler_app.models import Tenant
    from scheduler_app.services.task_definitions import task_create

    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "bench"})
    for index in range(count):
        task_create(
            tenant=tenant,
            spec={
                "name": f"shell-{index}",
                "schedule": {"type": "interval", "expression": "1s", "timezone": "UTC"},
                "handler": {"type": "shell", "command": ["true"]},
            },
        )


class _Monitor:
    """Redis MONITOR on the benchmark's dbs: commands counted by name."""

    def __init__(self, dbs: set[int]) -> None:
        self.dbs = dbs
        self.commands: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()  # command and key pattern
        self.counting = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with support.redis().monitor() as monitor:
            for event in monitor.listen():
                if self._stop.is_set():
                    return
                if self.counting and int(event.get("db", -1)) in self.dbs:
                    words = str(event.get("command", "?")).split(" ", 2)
                    self.commands[words[0].upper()] += 1
                    key = re.sub(r"[0-9a-f-]{8,}|\d+", "#", words[1]) if len(words) > 1 else ""
                    self.keys[f"{words[0].upper()} {key[:50]}"] += 1

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            support.redis().ping()  # one more line for the reader to wake on


def _statement_count(database: str, since: str, until: str) -> Counter[str]:
    """SQL statements the server logged for `database` between two log timestamps, by verb."""
    verbs: Counter[str] = Counter()
    marker = f"@{database} LOG:  statement: "
    with POSTGRES_LOG.open(errors="replace") as log:
        for line in log:
            if marker not in line or not (since <= line[:23] <= until):
                continue
            statement = line.split(marker, 1)[1].lstrip().upper()
            verbs[statement.split(None, 1)[0] if statement else "?"] += 1
    return verbs


def _lines(path: Path, start: int) -> tuple[int, int, Counter[str]]:
    with path.open("rb") as log:
        log.seek(start)
        data = log.read()
    kinds: Counter[str] = Counter()
    for line in data.splitlines():
        text = line.decode(errors="replace")
        # "[time: LEVEL/Process] logger-or-task: message" or "time LEVEL name message"
        match = re.search(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL)[/ ]\S*\]? ?(.{0,60})", text)
        kinds[re.sub(r"[0-9a-f-]{8,}|\d+(\.\d+)?", "#", match.group(2)) if match else "?"] += 1
    return data.count(b"\n"), len(data), kinds


def _database_counters(database: str) -> tuple[int, int]:
    """(sessions opened, transactions) on `database` so far, from pg_stat_database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT sessions, xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [database],
        )
        return cursor.fetchone()


def run(args: list[str]) -> None:
    os.environ.setdefault("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sched_runcost")
    support.DATABASE_URL = os.environ["BENCH_DATABASE_URL"]
    support.setup()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from bench.scenarios.shell_cpu import cpu_snapshot, cpu_used

    rate, seconds = _option(args, "rate", 100), _option(args, "seconds", 20)
    monitor_on, profile_on = "--monitor" in args, "--profile" in args
    support.reset()
    _tasks_create(rate)
    database = settings.DATABASES["default"]["NAME"]
    # The stack's defaults: INFO, events on (make run sets neither).
    env = {"LOG_LEVEL": "INFO", "CELERY_SEND_EVENTS": "true"}
    worker = support.spawn(WORKER_ARGV, log_name="default-worker", **env)
    time.sleep(8)
    beat = support.spawn(BEAT_ARGV, log_name="default-beat", **env)
    time.sleep(8)  # lead, load, first fires
    logs = {name: LOG_DIR / f"default-{name}.log" for name in ("worker", "beat")}
    offsets = {name: path.stat().st_size for name, path in logs.items()}
    monitor = None
    if monitor_on:
        dbs = {
            int(support.redis().connection_pool.connection_kwargs.get("db", 0)),
            int(os.environ["LIVE_LOGS_REDIS_URL"].rsplit("/", 1)[1]),
        }
        monitor = _Monitor(dbs)
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER DATABASE \"{database}\" SET log_statement = 'all'")
        print("waiting for new connections to pick log_statement up: restarting the stack")
        support.stop(beat)
        support.stop(worker)
        worker = support.spawn(WORKER_ARGV, log_name="default-worker", **env)
        time.sleep(8)
        beat = support.spawn(BEAT_ARGV, log_name="default-beat", **env)
        time.sleep(8)
        offsets = {name: path.stat().st_size for name, path in logs.items()}
        monitor.counting = True
    profile_context = contextlib.nullcontext()
    if profile_on:
        from bench.profiling import sampled

        profile_context = sampled(
            {"worker": [worker.pid], "beat": [beat.pid]}, name=f"default-stack-{rate}"
        )
    load_before = os.getloadavg()[0]
    cpu_before = cpu_snapshot(worker.pid, beat.pid)
    counters_before = _database_counters(database)
    window_start = timezone.now()
    pg_since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    with profile_context as profile:
        time.sleep(seconds)
    window_end = timezone.now()
    pg_until = time.strftime("%Y-%m-%d %H:%M:%S.999", time.gmtime())
    cpu = cpu_used(cpu_before, cpu_snapshot(worker.pid, beat.pid))
    time.sleep(1)  # the backends report their counters at most once a second
    sessions, transactions = (
        after - before
        for after, before in zip(_database_counters(database), counters_before, strict=True)
    )
    if monitor is not None:
        monitor.counting = False
        monitor.stop()
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{database}" RESET log_statement')
    log_figures = {name: _lines(path, offsets[name]) for name, path in logs.items()}
    support.stop(beat)
    time.sleep(6)
    support.stop(worker)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT (task_id, scheduled_at)),"
            " count(*) FILTER (WHERE status = 'success'),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM started_at - scheduled_at))"
            " FROM scheduler_app_taskexecution WHERE scheduled_at > %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        rows, distinct, _succeeded, (p50, p99) = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM scheduler_app_taskexecution"
            " WHERE status = 'success' AND completed_at > %s AND completed_at <= %s",
            [window_start, window_end],
        )
        completed = max(1, cursor.fetchone()[0])
        cursor.execute(
            "SELECT status, count(*) FROM scheduler_app_taskexecution"
            " WHERE scheduled_at > %s AND scheduled_at <= %s GROUP BY status",
            [window_start, window_end],
        )
        statuses = dict(cursor.fetchall())
    print(
        f"offered {rate}/s for {seconds} s; fired {distinct / seconds:.1f}/s,"
        f" completed in window {completed}, doubled {rows - distinct}, statuses {statuses}"
    )
    print(f"schedule-to-start p50 {p50 and p50 * 1000:.0f} ms, p99 {p99 and p99 * 1000:.0f} ms")
    print(
        "CPU ms per completed run: "
        + ", ".join(f"{part} {used * 1000 / completed:.2f}" for part, used in cpu.items())
    )
    print(
        f"PostgreSQL per completed run: {sessions / completed:.3f} sessions opened,"
        f" {transactions / completed:.2f} transactions (this database, everyone on it)"
    )
    for name, (lines, size, kinds) in log_figures.items():
        print(f"{name} log: {lines / completed:.2f} lines, {size / completed:.0f} bytes per run")
        for kind, count in kinds.most_common(8):
            print(f"    {count / completed:6.2f}  {kind}")
    if monitor is not None:
        total = sum(monitor.commands.values())
        print(f"redis commands per run: {total / completed:.2f}")
        for command, count in monitor.commands.most_common(15):
            print(f"    {count / completed:6.2f}  {command}")
        print("redis commands per run, by key:")
        for command, count in monitor.keys.most_common(40):
            print(f"    {count / completed:6.2f}  {command}")
        statements = _statement_count(database, pg_since, pg_until)
        print(f"SQL statements per run: {sum(statements.values()) / completed:.2f}")
        for verb, count in statements.most_common(10):
            print(f"    {count / completed:6.2f}  {verb}")
    if profile_on:
        print("\n".join(profile.notes))
    print(f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    try:
        run(sys.argv[1:])
    finally:
        support.database_drop()
