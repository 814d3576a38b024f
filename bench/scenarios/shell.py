"""shell: what a sandboxed shell run costs, and the rate of shell fires one worker holds.

1. Spawn cost, side by side in one process made as big as a worker (~100 MB resident):
   `subprocess.run(["true"])`; the unsandboxed handler path (WORKER_SHELL_SANDBOX=off, the
   handler's old path: fork with a pre-exec hook, a temporary directory, waits for the group);
   and the sandboxed handler (`run_shell({"command": ["true"]})`: setpriv/prlimit/bwrap
   chained by exec, vfork, pidfd). Interleaved round-robin, so load from other processes hits
   all three alike. Wall time per run (median, p90) and CPU per run (this process and its
   reaped children, user + system).
2. Sustained: SCHEDULES interval schedules of 1 s with a shell `true` handler, through one
   real beat and one real prefork worker (concurrency 4): fires per second, schedule-to-start
   p50/p99/max, lost, duplicated.
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from datetime import timedelta

from bench import support
from bench.report import Result

NAME = "shell"
QUICK = True
DESCRIPTION = "sandboxed shell spawn cost vs bare subprocess.run; 300 shell fires/s on 1 worker"
RUNS = 200
SCHEDULES = 300
SECONDS = 20
CONCURRENCY = 4
BALLAST_BYTES = 100 * 1024 * 1024


def _option(args: list[str], name: str, default: int) -> int:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return int(arg.split("=", 1)[1])
    return default


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _spawn_costs(runs: int) -> list[dict]:
    import subprocess

    from handler_contract.base import BufferedLogSink, HandlerContext
    from workers.handlers.shell import ShellSandbox, run_shell

    # A worker pool process is this big; fork() copies page tables in proportion.
    ballast = bytearray(BALLAST_BYTES)
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1

    def context() -> HandlerContext:
        return HandlerContext(
            execution_id="bench",
            attempt=1,
            timeout_seconds=30,
            parameters={},
            log=BufferedLogSink(64 * 1024),
            cancel_event=threading.Event(),
        )

    def bare() -> None:
        subprocess.run(["true"], check=True)

    def old_path() -> None:
        outcome = run_shell({"command": ["true"]}, context(), sandbox=ShellSandbox(mode="off"))
        assert outcome.status == "success", outcome.error_message

    def sandboxed() -> None:
        outcome = run_shell({"command": ["true"]}, context())
        assert outcome.status == "success", outcome.error_message

    paths = {
        "bare subprocess.run(['true'])": bare,
        "handler, unsandboxed (old path)": old_path,
        "handler, sandboxed (bwrap)": sandboxed,
    }
    for run in paths.values():  # warm up: imports, the bwrap probe, page cache
        for _ in range(5):
            run()
    walls: dict[str, list[float]] = {name: [] for name in paths}
    cpus: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(runs):
        for name, run in paths.items():
            cpu_before = _cpu_seconds()
            started = time.perf_counter()
            run()
            walls[name].append(time.perf_counter() - started)
            cpus[name].append(_cpu_seconds() - cpu_before)
    del ballast
    bare_median = statistics.median(walls["bare subprocess.run(['true'])"])
    rows = []
    for name in paths:
        ordered = sorted(walls[name])
        median = statistics.median(ordered)
        rows.append(
            {
                "path": name,
                "runs": runs,
                "wall_p50_ms": round(median * 1000, 2),
                "wall_p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 2),
                "over_bare_p50_ms": round((median - bare_median) * 1000, 2),
                "cpu_ms_per_run": round(statistics.mean(cpus[name]) * 1000, 2),
            }
        )
    return rows


SHELL_TRUE = {"type": "shell", "command": ["true"]}
PYTHON_NOOP = {"type": "python", "callable": "noop"}


def _sustained(seconds: int, schedules: int, concurrency: int, handler: dict) -> dict:
    from django.db import connection
    from django.utils import timezone

    from scheduler_app.models import TaskDefinition, Tenant

    support.reset()
    created = timezone.now().replace(microsecond=0)
    support.tasks_copy(schedules, row=lambda i: ("interval", "1s", "UTC", None), created_at=created)
    tenant = support.bench_tenant()
    TaskDefinition.objects.filter(tenant=tenant).update(
        handler_type=handler["type"], handler_config=handler
    )
    # Quotas sized to the load: this measures the shell path, not quota enforcement.
    Tenant.objects.filter(id=tenant.id).update(
        max_runs_per_hour=10 * schedules * 3600, max_concurrent_runs=10_000
    )
    worker = support.spawn(
        [
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "-Q",
            "critical,normal,bulk",
            "-c",
            str(concurrency),
            "-P",
            "prefork",
            "-n",
            "shell@%h",
            "-l",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        log_name="shell-worker",
    )
    time.sleep(8)  # worker up
    beat = support.spawn(
        ["-m", "celery", "-A", "project", "beat", "-S", "scheduler_app.beat:LeaderScheduler"],
        log_name="shell-beat",
    )
    time.sleep(5)  # load, lead, first fires
    window_start = timezone.now()
    time.sleep(seconds)
    window_end = timezone.now()
    support.stop(beat)
    time.sleep(10)  # let the worker drain what was fired
    support.stop(worker)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT (task_id, scheduled_at)),"
            " count(*) FILTER (WHERE status = 'success'),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM started_at - scheduled_at)),"
            " max(extract(epoch FROM started_at - scheduled_at))"
            " FROM scheduler_app_taskexecution WHERE scheduled_at > %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        rows, distinct, succeeded, (p50, p99), worst = cursor.fetchone()
    second = timedelta(seconds=1)
    expected = schedules * max(
        0, (window_end - created) // second - (window_start - created) // second
    )

    def ms(value: float | None) -> float | str:
        return round(float(value) * 1000, 1) if value is not None else "-"

    return {
        "system": f"1 beat + 1x{concurrency} prefork worker, "
        + ("shell `true`" if handler["type"] == "shell" else "python `noop` (baseline)"),
        "offered_per_s": schedules,
        "fired_per_s": round(distinct / seconds, 1),
        "completed_per_s": round(succeeded / seconds, 1),
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "max_ms": ms(worst),
        "lost": max(0, expected - distinct),
        "duplicates": rows - distinct,
        "not_run": distinct - succeeded,
    }


def run(args: list[str]) -> Result:
    support.setup()
    runs = _option(args, "runs", RUNS)
    seconds = _option(args, "seconds", SECONDS)
    schedules = _option(args, "rate", SCHEDULES)
    load_before = os.getloadavg()[0]
    spawn_rows = _spawn_costs(runs)
    result = Result(
        scenario=NAME,
        columns=[
            "path",
            "runs",
            "wall_p50_ms",
            "wall_p90_ms",
            "over_bare_p50_ms",
            "cpu_ms_per_run",
        ],
        targets={
            "spawn": "sandboxed `true` <= 10 ms wall over bare subprocess.run (p50)",
            "sustained": "300 shell fires/s on 1 worker (concurrency 4), p99 schedule-to-start"
            " <= 1 s, 0 lost, 0 duplicated",
        },
    )
    for row in spawn_rows:
        result.add(**row)
    sustained = _sustained(seconds, schedules, CONCURRENCY, SHELL_TRUE)
    # The same load with a python no-op: what the worker path itself holds on this machine
    # at this moment, so the shell row can be read against it.
    baseline = _sustained(seconds, schedules, CONCURRENCY, PYTHON_NOOP)
    result.notes.append(
        "spawn: one process with a 100 MB resident ballast (a worker's size), the three paths"
        " interleaved run by run; cpu = user + system of the process and its reaped children"
    )
    for measured in (sustained, baseline):
        result.notes.append(
            "sustained ({system}): offered {offered_per_s}/s for {seconds} s, fired"
            " {fired_per_s}/s, completed {completed_per_s}/s, schedule-to-start p50 {p50_ms} ms,"
            " p99 {p99_ms} ms, max {max_ms} ms, lost {lost}, duplicated {duplicates}, not run"
            " {not_run}".format(seconds=seconds, **measured)
        )
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs shared with other work: figures measured on a loaded machine)"
    )
    return result
