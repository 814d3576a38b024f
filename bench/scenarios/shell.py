"""shell: what a sandboxed shell run costs, and the rate of shell fires one worker holds.

1. Spawn cost, side by side in one process made as big as a worker (~100 MB resident):
   `subprocess.run(["true"])`; the unsandboxed handler path (WORKER_SHELL_SANDBOX=off, the
   handler's old path: fork with a pre-exec hook, a temporary directory, waits for the group);
   and the sandboxed handler (`run_shell({"command": ["true"]})`: bwrap started by vfork,
   rlimits set through its start gate, or setpriv/prlimit/bwrap chained by exec for a root
   worker; pidfd). Interleaved round-robin, so load from other processes hits
   all of them alike. Wall time per run (median, p90) and CPU per run (this process and its
   reaped children, user + system).
2. The batch runner alone, in this process: batches of shell `true` runs one after the other
   (lane width 1) and in lanes (WORKER_BATCH_PARALLEL): runs per second, CPU per run.
3. Sustained: SCHEDULES interval schedules of 1 s with a shell `true` handler, through one
   real beat and one real prefork worker (concurrency 4): fires per second, schedule-to-start
   p50/p99/max, lost, duplicated; and where the CPU went during the window, per completed
   run: the worker's processes, what they started and reaped (setpriv/prlimit/bwrap and
   the sandboxes), the beat, this database's PostgreSQL backends, and the Redis server
   (shared with whatever else uses it on the machine: an upper bound), and how busy the
   whole machine was (kernel threads included). When the offered rate is not held (p99
   schedule-to-start over 1 s, or a fire lost, doubled or not run), the rate is raised
   from 60/s in steps of 30 to find the highest one held.
4. The sandbox floor: the sandbox alone started back to back by 8 threads with nothing else
   running, for bwrap alone and a root worker's chain: the most sandboxes per second this
   machine can start, and the machine's CPU per sandbox. A shell fire cannot cost less.
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
from bench.scenarios.shell_cpu import cpu_snapshot, cpu_used, sandbox_floor
from bench.support import machine_busy_seconds

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
    from sandbox.options import ShellSandbox
    from sandbox.rlimits import resolve_limits
    from workers.handlers.shell import run_shell
    from workers.handlers.shell_sandboxed import run_sandboxed

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

    def gated() -> None:
        # What a worker that is not root runs (the image's): the sandbox as the worker's own
        # user, rlimits set through bwrap's start gate, no setpriv/prlimit exec.
        outcome = run_sandboxed(
            ["true"], "none", context(), ShellSandbox(), resolve_limits(None), 1.0, None, {}
        )
        assert outcome.status == "success", outcome.error_message

    root = os.geteuid() == 0
    paths = {
        "bare subprocess.run(['true'])": bare,
        "handler, unsandboxed (old path)": old_path,
        (
            "handler, sandboxed, root worker (setpriv+prlimit+bwrap)"
            if root
            else "handler, sandboxed (bwrap, rlimits through its gate)"
        ): sandboxed,
    }
    if root:
        paths["handler, sandboxed, non-root worker's path (bwrap, gate)"] = gated
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
LANE_BATCH = 50
LANE_BATCHES = 4


def _lanes(widths: tuple[int, ...]) -> list[str]:
    """The batch runner alone, in this process (no Celery, no beat): LANE_BATCHES batches of
    LANE_BATCH shell `true` runs through `execution_batch_run`, at each lane width; runs per
    second and CPU per run (this process, and what it reaped: the sandboxes)."""
    import uuid
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
    from workers.runner import execution_batch_run

    support.reset()
    support.tasks_copy(1, row=lambda i: ("manual", "", "UTC", None), created_at=timezone.now())
    tenant = support.bench_tenant()
    TaskDefinition.platform.filter(tenant=tenant).update(
        handler_type="shell", handler_config=SHELL_TRUE
    )
    Tenant.objects.filter(id=tenant.id).update(max_runs_per_hour=10**9, max_concurrent_runs=10**6)
    task = TaskDefinition.platform.get(tenant=tenant)
    saved = settings.WORKER, settings.FAIR_INFLIGHT_PER_TENANT
    settings.FAIR_INFLIGHT_PER_TENANT = 0

    def batch(count: int) -> str:
        due, ids, rows = timezone.now() - timedelta(seconds=1), [], []
        for index in range(count):
            run_id = uuid.uuid4()
            ids.append(str(run_id))
            rows.append(
                TaskExecution(
                    id=run_id,
                    tenant_id=task.tenant_id,
                    task=task,
                    status="queued",
                    trigger="manual",
                    priority=task.priority,
                    queue="bench-lanes",
                    scheduled_at=due + timedelta(microseconds=index),
                    queued_at=due,
                    attempt=1,
                    max_attempts=task.max_attempts,
                    root_execution_id=run_id,
                )
            )
        TaskExecution.objects.bulk_create(rows)
        return execution_batch_run(execution_ids=ids, worker_id="bench-lanes@host")

    notes = []
    try:
        for width in widths:
            # No spill: this measures how fast a batch goes, not when it gives up.
            settings.WORKER = {**saved[0], "BATCH_PARALLEL": width, "BATCH_SPILL_SECONDS": 60}
            batch(5)  # warm up
            cpu_before, started = _cpu_seconds(), time.perf_counter()
            summaries = [batch(LANE_BATCH) for _ in range(LANE_BATCHES)]
            elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_before
            runs = LANE_BATCH * LANE_BATCHES
            ok = all(summary.endswith(f"{LANE_BATCH} success") for summary in summaries)
            notes.append(
                f"width {width}: {runs / elapsed:.1f} runs/s, {cpu * 1000 / runs:.2f} CPU ms"
                f" per run{'' if ok else ' (not all succeeded: ' + '; '.join(summaries) + ')'}"
            )
    finally:
        settings.WORKER, settings.FAIR_INFLIGHT_PER_TENANT = saved
    return notes


PYTHON_NOOP = {"type": "python", "callable": "noop"}


def _sustained(seconds: int, schedules: int, concurrency: int, handler: dict) -> dict:
    from django.db import connection
    from django.utils import timezone

    from scheduler_app.models import TaskDefinition, Tenant

    support.reset()
    created = timezone.now().replace(microsecond=0)
    support.tasks_copy(schedules, row=lambda i: ("interval", "1s", "UTC", None), created_at=created)
    tenant = support.bench_tenant()
    TaskDefinition.platform.filter(tenant=tenant).update(
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
        log_name=f"shell-worker-{handler['type']}",
    )
    time.sleep(8)  # worker up
    beat = support.spawn(
        ["-m", "celery", "-A", "project", "beat", "-S", "beat:LeaderScheduler"],
        log_name="shell-beat",
    )
    time.sleep(5)  # load, lead, first fires
    cpu_before = cpu_snapshot(worker.pid, beat.pid)
    busy_before = machine_busy_seconds()
    window_start = timezone.now()
    time.sleep(seconds)
    window_end = timezone.now()
    machine_busy = (machine_busy_seconds() - busy_before) / seconds
    cpu = cpu_used(cpu_before, cpu_snapshot(worker.pid, beat.pid))
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
        cursor.execute(
            "SELECT count(*) FROM scheduler_app_taskexecution"
            " WHERE status = 'success' AND completed_at > %s AND completed_at <= %s",
            [window_start, window_end],
        )
        completed_in_window = cursor.fetchone()[0]
    second = timedelta(seconds=1)
    expected = schedules * max(
        0, (window_end - created) // second - (window_start - created) // second
    )

    def ms(value: float | None) -> float | str:
        return round(float(value) * 1000, 1) if value is not None else "-"

    user = " as root (setpriv+prlimit+bwrap)" if os.geteuid() == 0 else ""
    return {
        "system": f"1 beat + 1x{concurrency} prefork worker{user}, "
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
        "cpu": f"CPU ms per run completed in the window ({completed_in_window}): "
        + ", ".join(
            f"{part} {used * 1000 / max(1, completed_in_window):.2f}" for part, used in cpu.items()
        )
        + f"; all of them {sum(cpu.values()) / seconds:.2f} CPU-s/s; the whole machine"
        f" {machine_busy:.2f} CPU-s/s of {os.cpu_count()}",
    }


# The search for the highest rate held: from this rate up, in these steps.
HELD_FROM = 60
HELD_STEP = 30
HELD_P99_MS = 1000


def _held(measured: dict) -> bool:
    return support.rate_held(measured, p99_limit_ms=HELD_P99_MS)


def _highest_held(seconds: int, *, below: int) -> dict | None:
    """The offered rate raised in HELD_STEP steps from HELD_FROM until a step is not held
    (or reaches ``below``, measured already): the last step held, marked as such."""
    best = None
    for rate in range(HELD_FROM, below, HELD_STEP):
        measured = _sustained(seconds, rate, CONCURRENCY, SHELL_TRUE)
        if not _held(measured):
            if best is not None:
                best["system"] += f"; the next step, {rate}/s, was not held (p99"
                best["system"] += f" {measured['p99_ms']} ms, {measured['not_run']} not run)"
            break
        best = measured
        best["system"] += ", the highest rate held"
    return best


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
    from django.conf import settings

    floor = sandbox_floor()
    lanes = _lanes((1, settings.WORKER["BATCH_PARALLEL"]))
    sustained = _sustained(seconds, schedules, CONCURRENCY, SHELL_TRUE)
    held = None if _held(sustained) else _highest_held(seconds, below=schedules)
    # The same load with a python no-op: what the worker path itself holds on this machine
    # at this moment, so the shell row can be read against it.
    baseline = _sustained(seconds, schedules, CONCURRENCY, PYTHON_NOOP)
    result.notes.append(
        "spawn: one process with a 100 MB resident ballast (a worker's size), the paths"
        " interleaved run by run; cpu = user + system of the process and its reaped children"
    )
    result.notes.append(
        f"batch runner alone (one process, {LANE_BATCHES} batches of {LANE_BATCH} shell"
        " `true`, lanes: WORKER_BATCH_PARALLEL): " + "; ".join(lanes)
    )
    result.notes += floor
    for measured in (sustained, held, baseline):
        if measured is None:
            continue
        result.notes.append(
            "sustained ({system}): offered {offered_per_s}/s for {seconds} s, fired"
            " {fired_per_s}/s, completed {completed_per_s}/s, schedule-to-start p50 {p50_ms} ms,"
            " p99 {p99_ms} ms, max {max_ms} ms, lost {lost}, duplicated {duplicates}, not run"
            " {not_run}; {cpu}".format(seconds=seconds, **measured)
        )
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs shared with other work: figures measured on a loaded machine)"
    )
    return result
