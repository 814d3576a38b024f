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
3. The stack (bench/scenarios/shell_stack.py, a table of its own): --rate (default 150)
   interval schedules of 1 s with a shell `true` handler, made by the task service, through
   the stack `make run` starts (bench/stack_defaults.py: its beat and worker commands, INFO
   logs, the tenant's default quotas, default fairness, gossip/mingle/heartbeat on): fires per
   second, schedule-to-start p50/p99/max, lost, duplicated, not run, and where the CPU went,
   for a root worker and the image's non-root worker (the Dockerfile's USER, through
   setpriv: its sandbox is bwrap in a user namespace, a root worker's setpriv/prlimit/bwrap);
   the target row (150/s, p99 <= 2 s, 0 lost, 0 doubled: held or not); a python no-op
   baseline (--baseline=no leaves it out); each departure asked for with
   --departures=KEY[+KEY],... as a row of its own (keys in bench/stack_defaults.py;
   `old-bench` is every departure the bench used to make at once); --search raises the rate
   from 60/s in steps of 30 to the highest held with defaults.
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

from bench import stack_defaults, support
from bench.report import Result
from bench.scenarios.shell_cpu import sandbox_floor
from bench.scenarios.shell_stack import SHELL_TRUE as STACK_SHELL_TRUE
from bench.scenarios.shell_stack import TARGET_P99_MS, TARGET_RATE, held, one_rate, stack_section

NAME = "shell"
QUICK = True
DESCRIPTION = (
    "sandboxed shell spawn cost vs bare subprocess.run; 150 shell fires/s on the default stack"
)
RUNS = 200
SECONDS = 20
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


SHELL_TRUE = STACK_SHELL_TRUE
LANE_BATCH = 50
LANE_BATCHES = 4


def _lanes(widths: tuple[int, ...]) -> list[str]:
    """The batch runner alone, in this process (no Celery, no beat): LANE_BATCHES batches of
    LANE_BATCH shell `true` runs through `execution_batch_run`, at each lane width; runs per
    second and CPU per run (this process, and what it reaped: the sandboxes)."""
    import uuid

    from django.conf import settings
    from django.utils import timezone

    from scheduler_app.models import TaskExecution, Tenant
    from workers.runner import execution_batch_run

    support.reset()
    (task,) = support.tasks_create(1, spec={"schedule": {"type": "manual"}, "handler": SHELL_TRUE})
    tenant = support.bench_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_runs_per_hour=10**9, max_concurrent_runs=10**6)
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


# The search for the highest rate held (--search): from this rate up, in these steps.
HELD_FROM = 60
HELD_STEP = 30


def _highest_held(seconds: int, *, below: int) -> str:
    """The offered rate raised in HELD_STEP steps from HELD_FROM, with defaults and a root
    worker, until a step is not held (or reaches ``below``, measured already)."""
    best = None
    for rate in range(HELD_FROM, below, HELD_STEP):
        measured = one_rate(seconds, rate, stack_defaults.DEFAULTS)
        if not held(measured):
            tail = f"; {rate}/s was not held (p99 {measured['p99_ms']} ms, {measured['not_run']}"
            return f"highest rate held, defaults: {best or 'none'}/s" + tail + " not run)"
        best = rate
    return f"highest rate held, defaults: {best or 'none'}/s (every step below {below}/s held)"


def run(args: list[str]) -> Result:
    support.setup()
    runs = _option(args, "runs", RUNS)
    seconds = _option(args, "seconds", SECONDS)
    rate = _option(args, "rate", TARGET_RATE)
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
            "stack": f"{TARGET_RATE} sandboxed shell fires/s with default settings on this"
            f" machine, p99 schedule-to-start <= {TARGET_P99_MS / 1000:g} s, 0 lost,"
            " 0 doubled; a root worker and the image's non-root worker side by side",
        },
    )
    for row in spawn_rows:
        result.add(**row)
    from django.conf import settings

    floor = sandbox_floor()
    lanes = _lanes((1, settings.WORKER["BATCH_PARALLEL"]))
    result.notes.append(
        "spawn: one process with a 100 MB resident ballast (a worker's size), the paths"
        " interleaved run by run; cpu = user + system of the process and its reaped children"
    )
    result.notes.append(
        f"batch runner alone (one process, not a stack: quotas raised and fairness off in it;"
        f" {LANE_BATCHES} batches of {LANE_BATCH} shell `true`, lanes: WORKER_BATCH_PARALLEL): "
        + "; ".join(lanes)
    )
    result.notes += floor
    result.sections.append(stack_section(args, seconds=seconds, rate=rate))
    if "--search" in args:
        result.sections[-1].notes.append(_highest_held(seconds, below=rate))
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs shared with other work: figures measured on a loaded machine)"
    )
    return result
