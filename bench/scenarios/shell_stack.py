"""`bench shell`'s stack rows: shell fires a second through the stack a user starts
(bench/stack_defaults.py), a root worker and the image's non-root worker side by side, the
issue's target row, and each departure asked for as a row of its own."""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta

from bench import stack_defaults, support
from bench.report import Result
from bench.scenarios.shell_cpu import cpu_snapshot, cpu_used
from bench.support import machine_busy_seconds

SHELL_TRUE = {"type": "shell", "command": ["true"]}
PYTHON_NOOP = {"type": "python", "callable": "noop"}
TARGET_RATE = 150
TARGET_P99_MS = 2000.0
WORKER_UP_SECONDS = 8
BEAT_UP_SECONDS = 5
DRAIN_SECONDS = 10

COLUMNS = [
    "row",
    "worker_user",
    "offered_per_s",
    "fired_per_s",
    "completed_per_s",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "lost",
    "duplicates",
    "not_run",
    "held",
]


def worker_users() -> list[tuple[str, int | None, str]]:
    """(label, uid to run the worker as or None for this process's own, why it cannot be
    started or ""): a root worker, and the image's non-root user (the Dockerfile's USER)."""
    user, uid = stack_defaults.image_user()
    image = f"{user} (uid {uid}, the image's)"
    if os.geteuid() != 0:
        return [
            ("root", None, f"not started: the bench runs as uid {os.geteuid()}, not root"),
            (image, None, "" if os.geteuid() == uid else f"as uid {os.geteuid()}, not {uid}"),
        ]
    if shutil.which("setpriv") is None:
        return [("root", None, ""), (image, None, "not started: no setpriv to drop to it")]
    why_not = _interpreter_refuses(uid)
    return [("root", None, ""), (image, None if why_not else uid, why_not)]


PROBE = "import sys; print(sys.version.split()[0]); import celery, django, redis"


def _interpreter_refuses(uid: int) -> str:
    """Why this bench's Python cannot run a worker as ``uid`` ("" when it can): the worker's
    imports tried as that user, with the stack's environment."""
    import subprocess
    import sys

    python, interpreter_env = stack_defaults.non_root_python()
    probe = subprocess.run(
        [*stack_defaults.run_as(uid), python, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=support.ROOT,
        env=support.service_env(**stack_defaults.stack_env(()), **interpreter_env),
        timeout=120,
    )
    if probe.returncode == 0:
        return ""
    seen = (probe.stdout.strip() or "?").splitlines()[0]
    error = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return (
        f"not started: as uid {uid}, {python} runs Python {seen} (this bench's is"
        f" {sys.version.split()[0]}: its real interpreter is out of that user's reach, e.g."
        f" under a 0700 home; BENCH_NON_ROOT_PYTHON names one it can read) and the worker's"
        f" imports fail: {error}"
    )


def one_rate(
    seconds: int,
    rate: int,
    combo: stack_defaults.Combo,
    *,
    handler: dict = SHELL_TRUE,
    run_as_uid: int | None = None,
) -> dict:
    """``rate`` interval schedules of 1 s (made by the task service) through one beat and
    the stack's worker(s), for ``seconds``: fires a second, schedule-to-start, lost,
    doubled, not run; and where the CPU went during the window."""
    from django.db import connection
    from django.utils import timezone

    support.reset()
    tasks = support.tasks_create(
        rate, spec={"schedule": {"type": "interval", "expression": "1s"}, "handler": handler}
    )
    created = tasks[0].created_at.replace(microsecond=0)  # fires on the whole seconds after it
    stack_defaults.tenant_quotas_for(combo, rate=rate)
    tag = "root" if run_as_uid is None else f"uid{run_as_uid}"
    pool = stack_defaults.start_worker(
        combo, name="shell", log_name=f"shell-worker-{handler['type']}-{tag}", run_as_uid=run_as_uid
    )
    beat = None
    try:
        time.sleep(WORKER_UP_SECONDS)
        beat = stack_defaults.start_beat(combo, log_name="shell-beat")
        time.sleep(BEAT_UP_SECONDS)
        cpu_before = cpu_snapshot(pool[0].pid, beat.pid)
        busy_before = machine_busy_seconds()
        window_start = timezone.now()
        time.sleep(seconds)
        window_end = timezone.now()
        # A loaded machine oversleeps: rates are over the window's real length.
        seconds = (window_end - window_start).total_seconds()
        machine_busy = (machine_busy_seconds() - busy_before) / seconds
        cpu = cpu_used(cpu_before, cpu_snapshot(pool[0].pid, beat.pid))
        support.stop(beat)
        time.sleep(DRAIN_SECONDS)  # let the worker run what was fired
    finally:
        if beat is not None:
            support.stop(beat)
        for process in pool:
            support.stop(process)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT (task_id, scheduled_at)),"
            " count(*) FILTER (WHERE status = 'success'),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM started_at - scheduled_at)),"
            " max(extract(epoch FROM started_at - scheduled_at)),"
            " min(error_message) FILTER (WHERE status <> 'success' AND error_message <> '')"
            " FROM scheduler_app_taskexecution WHERE scheduled_at > %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        rows, distinct, succeeded, percentiles, worst, an_error = cursor.fetchone()
        p50, p99 = percentiles or (None, None)  # NULL when no run started
        cursor.execute(
            "SELECT count(*) FROM scheduler_app_taskexecution"
            " WHERE status = 'success' AND completed_at > %s AND completed_at <= %s",
            [window_start, window_end],
        )
        completed_in_window = cursor.fetchone()[0]
    second = timedelta(seconds=1)
    expected = rate * max(0, (window_end - created) // second - (window_start - created) // second)

    def ms(value: float | None) -> float | str:
        return round(float(value) * 1000, 1) if value is not None else "-"

    count, concurrency = stack_defaults.worker_count_and_concurrency(combo)
    return {
        "offered_per_s": rate,
        "fired_per_s": round(distinct / seconds, 1),
        "completed_per_s": round(succeeded / seconds, 1),
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "max_ms": ms(worst),
        "lost": max(0, expected - distinct),
        "duplicates": rows - distinct,
        "not_run": distinct - succeeded,
        "error": (an_error or "")[:160],
        "cpu": f"1 beat + {count}x{concurrency} prefork worker(s); CPU ms per run completed in"
        f" the window ({completed_in_window}): "
        + ", ".join(
            f"{part} {used * 1000 / max(1, completed_in_window):.2f}" for part, used in cpu.items()
        )
        + f"; all of them {sum(cpu.values()) / seconds:.2f} CPU-s/s; the whole machine"
        f" {machine_busy:.2f} CPU-s/s of {os.cpu_count()}",
    }


def held(measured: dict, *, p99_limit_ms: float = TARGET_P99_MS) -> bool:
    return support.rate_held(measured, p99_limit_ms=p99_limit_ms)


def _why_not(measured: dict) -> str:
    why = [f"p99 {measured['p99_ms']} ms"]
    why += [f"{measured[k]} {k}" for k in ("lost", "duplicates", "not_run") if measured[k]]
    return ", ".join(why)


def _verdict(measured: dict) -> str:
    return "held" if held(measured) else f"not held ({_why_not(measured)})"


def stack_section(args: list[str], *, seconds: int, rate: int) -> Result:
    """The stack rows: at ``rate``, defaults with a root worker and with the image's user,
    the target row, the departures asked for (root worker), a python no-op baseline."""
    section = Result(scenario="shell stack", columns=COLUMNS)
    section.notes.append(stack_defaults.defaults_note())
    if os.environ.get("BENCH_NON_ROOT_PYTHON"):
        section.notes.append(
            "the image's user's worker ran on BENCH_NON_ROOT_PYTHON"
            f" ({os.environ['BENCH_NON_ROOT_PYTHON']}) with this virtualenv's packages: this"
            " bench's interpreter is out of that user's reach"
        )
    base = f"shell {rate}/s"
    measured_by_user: dict[str, dict | str] = {}
    for user, uid, why_not in worker_users():
        if why_not.startswith("not started"):
            section.add(row=stack_defaults.label(base, ()), worker_user=user, held=why_not)
            measured_by_user[user] = why_not
            continue
        measured = one_rate(seconds, rate, stack_defaults.DEFAULTS, run_as_uid=uid)
        measured_by_user[user] = measured
        section.add(
            row=stack_defaults.label(base, ()),
            worker_user=user + (f" ({why_not})" if why_not else ""),
            held=_verdict(measured),
            **{k: measured[k] for k in COLUMNS if k in measured},
        )
        section.notes.append(f"{base}, defaults, {user}: {measured['cpu']}")
        if measured["error"]:
            section.notes.append(f"{base}, defaults, {user}: a run's error: {measured['error']}")
    for row in _target_rows(rate, measured_by_user):
        section.add(**row)
    for combo in stack_defaults.departure_rows(args)[1:]:
        measured = one_rate(seconds, rate, combo)
        section.add(
            row=stack_defaults.label(base, combo),
            worker_user="root",
            held=_verdict(measured),
            **{k: measured[k] for k in COLUMNS if k in measured},
        )
        section.notes.append(f"{stack_defaults.label(base, combo)}: {measured['cpu']}")
    if "--baseline=no" not in args:
        # The same load with a python no-op: what the worker path itself holds here now.
        measured = one_rate(seconds, rate, stack_defaults.DEFAULTS, handler=PYTHON_NOOP)
        section.add(
            row=stack_defaults.label(f"python noop {rate}/s (baseline)", ()),
            worker_user="root" if os.geteuid() == 0 else f"uid {os.geteuid()}",
            held=_verdict(measured),
            **{k: measured[k] for k in COLUMNS if k in measured},
        )
    section.notes.append(
        f"held = p99 schedule-to-start <= {TARGET_P99_MS:.0f} ms (over the runs that started),"
        " 0 lost, 0 doubled, all run (not_run: fired, not run 10 s after the window);"
        f" each row: {seconds} s window after {WORKER_UP_SECONDS + BEAT_UP_SECONDS} s of start-up,"
        " interval schedules of 1 s made together (every fire of a second due at one instant)"
    )
    return section


def _target_rows(rate: int, measured_by_user: dict[str, dict | str]) -> list[dict]:
    """The issue's target, a row per worker user: TARGET_RATE sandboxed shell fires/s with
    default settings, p99 <= 2 s, 0 lost, 0 doubled; held or not, with the figures."""
    name = (
        f"target: {TARGET_RATE} sandboxed shell fires/s, defaults, p99 <="
        f" {TARGET_P99_MS / 1000:g} s, 0 lost, 0 doubled"
    )
    if rate != TARGET_RATE:
        return [{"row": name, "held": f"not measured (offered {rate}/s: --rate={TARGET_RATE})"}]
    rows = []
    for user, measured in measured_by_user.items():
        if isinstance(measured, str):
            rows.append({"row": name, "worker_user": user, "held": measured})
            continue
        figures = {k: measured[k] for k in COLUMNS if k in measured}
        verdict = "held" if held(measured) else f"NOT held: {_why_not(measured)}"
        rows.append({"row": name, "worker_user": user, **figures, "held": verdict})
    return rows
