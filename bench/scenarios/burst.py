"""burst: N fires due at the same instant, run end to end on the bench's workers.

One beat and the default stack's worker (bench/stack_defaults.py; --departures=... adds rows);
N one-shot tasks made by the task service whose next fire is
the same instant (python `noop`). Reported: when the burst was recorded and rung against its
due instant (negative: before it), and schedule-to-start (the handler's start minus the due
instant) p50/p99/max, with lost and doubled fires. Rows: the default lead (0.5 s, a burst up
to SCHEDULER_FIRE_AHEAD_MAX_SECONDS) and the fixed 0.5 s lead (the `fixed-lead` departure:
SCHEDULER_FIRE_AHEAD_MAX_SECONDS=0, a row of its own).

    python -m bench burst [--size=10000]
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from bench import stack_defaults, support
from bench.report import Result
from bench.support import machine_busy_seconds

NAME = "burst"
QUICK = False
DESCRIPTION = "a 10k burst of no-op runs due at once: rung before its time? schedule-to-start"
SIZE = 10_000
LEAD_SECONDS = 20.0  # from the beat's start to the due instant: load, workers up
P99_TARGET_MS = 1000.0
# The machine's CPU is counted from this long before the due instant (longer than the
# largest lead, SCHEDULER_FIRE_AHEAD_MAX_SECONDS, so the burst's every ring is inside).
CPU_WINDOW_AHEAD_SECONDS = 9.0


def _one(size: int, *, combo: stack_defaults.Combo) -> dict:
    from django.conf import settings
    from django.db import connection

    fixed = stack_defaults.FIXED_LEAD in combo
    most = 0.0 if fixed else settings.SCHEDULER["FIRE_AHEAD_MAX_SECONDS"]

    support.reset()
    # One-shot tasks as a user makes them (the task service), all due at the same instant.
    run_at = datetime.fromtimestamp(time.time() + LEAD_SECONDS, UTC).replace(microsecond=0)
    tasks = support.tasks_create(
        size,
        spec={
            "schedule": {"type": "once", "run_at": run_at.isoformat()},
            "handler": {"type": "python", "callable": "noop"},
        },
    )
    due = tasks[0].next_fire_at
    stack_defaults.tenant_quotas_for(combo, rate=size)
    pool = stack_defaults.start_worker(combo, name="b", log_name="burst-worker")
    beat = stack_defaults.start_beat(combo, log_name="burst-beat")
    busy_from: float | None = None
    busy = 0.0
    try:
        deadline = time.time() + LEAD_SECONDS + 120
        while time.time() < deadline:
            if busy_from is None and time.time() >= due.timestamp() - CPU_WINDOW_AHEAD_SECONDS:
                busy_from = machine_busy_seconds()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('success', 'failed'))"
                    " FROM scheduler_app_taskexecution"
                )
                (done,) = cursor.fetchone()
            if done >= size:
                if busy_from is not None:
                    busy = machine_busy_seconds() - busy_from
                break
            time.sleep(0.5)
    finally:
        support.stop(beat)
        for process in pool:
            support.stop(process)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT task_id), count(*) FILTER (WHERE status = 'success'),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM started_at - scheduled_at)),"
            " max(extract(epoch FROM started_at - scheduled_at)),"
            " min(extract(epoch FROM created_at - scheduled_at)),"
            " max(extract(epoch FROM created_at - scheduled_at))"
            " FROM scheduler_app_taskexecution",
        )
        rows, distinct, succeeded, (p50, p99), worst, first_rec, last_rec = cursor.fetchone()
    label = "ours, rung 0.5 s ahead"
    label += f", a burst up to {most:g} s" if most > 0.5 else ""
    workers, concurrency = stack_defaults.worker_count_and_concurrency(combo)
    return {
        "system": stack_defaults.label(
            f"{label}: 1 beat + {workers}x{concurrency} prefork workers", combo
        ),
        "size": size,
        "recorded_first_s": round(first_rec, 3) if first_rec is not None else "-",
        "recorded_last_s": round(last_rec, 3) if last_rec is not None else "-",
        "p50_ms": round(p50 * 1000, 1) if p50 is not None else "-",
        "p99_ms": round(p99 * 1000, 1) if p99 is not None else "-",
        "max_ms": round(float(worst) * 1000, 1) if worst is not None else "-",
        "lost": size - distinct,
        "duplicates": rows - distinct,
        "not_run": distinct - succeeded,
        "machine_cpu_ms_per_run": round(busy * 1000 / size, 2) if busy else "-",
    }


def run(args: list[str]) -> Result:

    support.setup()
    size = SIZE
    for arg in args:
        if arg.startswith("--size="):
            size = int(arg.split("=", 1)[1])
    result = Result(
        scenario=NAME,
        columns=[
            "system",
            "size",
            "recorded_first_s",
            "recorded_last_s",
            "p50_ms",
            "p99_ms",
            "max_ms",
            "lost",
            "duplicates",
            "not_run",
            "machine_cpu_ms_per_run",
        ],
        targets={
            "burst": f"every fire recorded (and rung) before its due instant; p99"
            f" schedule-to-start <= {P99_TARGET_MS:.0f} ms for a {SIZE:,} burst of no-op runs"
        },
        notes=[
            "recorded = the row's created_at - the due instant (the doorbell goes out after"
            " the row's commit, within the same tick: bench fire-storm times the doorbells);"
            " schedule-to-start = started_at (the handler's start) - the due instant;"
            " machine_cpu_ms_per_run = the whole machine's busy CPU from"
            f" {CPU_WINDOW_AHEAD_SECONDS:g} s before the due instant (the earliest the lead"
            " rings) until every run ended, per run: beat, workers, PostgreSQL, Redis and the"
            " kernel, claims to finishes"
        ],
    )
    result.notes.append(stack_defaults.defaults_note())
    load_before = os.getloadavg()[0]
    for combo in stack_defaults.departure_rows(args):
        result.add(**_one(size, combo=combo))
    # The fixed lead: a departure of its own (SCHEDULER_FIRE_AHEAD_MAX_SECONDS=0), named.
    result.add(**_one(size, combo=(stack_defaults.FIXED_LEAD,)))
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs; the run itself keeps them busy)"
    )
    return result
