"""sustained: 833 fires/s offered for 60 s (833 interval schedules of 1 s, python `noop`
handler) through one real beat and real prefork workers; beside it, raw Celery's no-op
throughput on the same broker as the ceiling for this machine.

Interval fires land on whole seconds, so all 833 are due at the same instant every second:
the burst that p99 schedule-to-start measures is 833 runs that start together."""

from __future__ import annotations

import contextlib
import os
import time
from datetime import timedelta

from bench import stack_defaults, support
from bench.profiling import sampled
from bench.report import Result

NAME = "sustained"
QUICK = False
DESCRIPTION = "833 fires/s for 60 s end to end: achieved rate, schedule-to-start p50-max, lost, dup"
SCHEDULES = 833
SECONDS = 60
NOOP_EVERY_SECOND = {
    "schedule": {"type": "interval", "expression": "1s"},
    "handler": {"type": "python", "callable": "noop"},
}


def _option(args: list[str], name: str, default: int) -> int:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return int(arg.split("=", 1)[1])
    return default


def _workers(count: int, concurrency: int, *, app: str, queues: str, tag: str) -> list:
    return [
        support.spawn(
            [
                "-m",
                "celery",
                "-A",
                app,
                "worker",
                "-Q",
                queues,
                "-c",
                str(concurrency),
                "-P",
                "prefork",
                "-n",
                f"{tag}{i}@%h",
                "-l",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            log_name=f"sustained-{tag}{i}",
        )
        for i in range(count)
    ]


def _cpu_seconds(roots: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    """CPU seconds (user + system) used so far by each process of each group, by pid: the
    process trees under the group's pids; and the whole machine's busy time under pid 0 of
    the group `machine`."""
    import psutil

    sampled: dict[str, dict[int, float]] = {}
    for group, pids in roots.items():
        processes = []
        for pid in pids:
            try:
                root = psutil.Process(pid)
                processes += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        used: dict[int, float] = {}
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            used[process.pid] = times.user + times.system
        sampled[group] = used
    machine = psutil.cpu_times()
    busy = ("user", "nice", "system", "irq", "softirq")  # (guest time is inside user)
    sampled["machine"] = {0: sum(getattr(machine, name, 0.0) for name in busy)}
    return sampled


def _cpu_used(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict:
    """CPU seconds each group used between two samples (processes alive at the second), and
    `rest`: what the rest of the machine used, PostgreSQL and Redis above all."""
    used = {
        group: sum(now - before[group].get(pid, 0.0) for pid, now in after[group].items())
        for group in after
    }
    used["rest"] = used.pop("machine") - sum(used.values())
    return used


# Nine processes sampled at once (8 pool processes and the beat): a low rate keeps the
# samplers' own CPU from moving the step it measures.
PROFILE_RATE_HZ = 20


def _ours(
    seconds: int,
    combo: stack_defaults.Combo = stack_defaults.DEFAULTS,
    schedules: int = SCHEDULES,
    profile: str | None = None,
) -> dict:
    """`schedules` interval schedules of 1 s (that many fires a second, made by the task
    service) for `seconds`, through the stack `make run` starts with ``combo``'s departures
    (bench/stack_defaults.py); ``profile``: sample the workers and the beat through the
    window under that name (`bench.profiling`), its notes in the row's "profile"."""
    from django.db import connection
    from django.utils import timezone

    support.reset()
    tasks = support.tasks_create(schedules, spec=NOOP_EVERY_SECOND)
    created = tasks[0].created_at
    # The tenant's default quotas (10,000 runs an hour defer every run after the first 12 s
    # of 833/s) unless the `raised-quotas` departure sizes them to the load.
    stack_defaults.tenant_quotas_for(combo, rate=schedules)
    pool = stack_defaults.start_worker(combo, name="w", log_name="sustained-w")
    time.sleep(8)  # workers up
    beat = stack_defaults.start_beat(combo, log_name="sustained-beat")
    time.sleep(5)  # load, lead, first fires
    groups = {
        "workers": [process.pid for process in pool],
        "beat": [beat.pid],
    }
    cpu_before = _cpu_seconds(groups)
    window_start = timezone.now()
    with (
        sampled(groups, name=profile, rate_hz=PROFILE_RATE_HZ)
        if profile
        else contextlib.nullcontext()
    ) as sampling:
        time.sleep(seconds)
    window_end = timezone.now()
    cpu_used = _cpu_used(cpu_before, _cpu_seconds(groups))
    # A loaded machine oversleeps: rates are over the window's real length.
    elapsed = (window_end - window_start).total_seconds()
    support.stop(beat)
    time.sleep(10)  # let the workers drain what was fired
    for process in pool:
        support.stop(process)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT (task_id, scheduled_at)),"
            " count(*) FILTER (WHERE status = 'success'),"
            " percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM started_at - scheduled_at)),"
            " max(extract(epoch FROM started_at - scheduled_at)),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            "   (ORDER BY extract(epoch FROM created_at - scheduled_at))"
            " FROM scheduler_app_taskexecution WHERE scheduled_at > %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        rows, distinct, succeeded, (p50, p95, p99), worst, recorded = cursor.fetchone()
    expected = _fires_due(created, window_start, window_end, schedules)
    workers, concurrency = stack_defaults.worker_count_and_concurrency(combo)
    return {
        "system": stack_defaults.label(
            f"ours {schedules}/s: 1 beat + {workers}x{concurrency} prefork workers", combo
        ),
        "offered_per_s": schedules,
        "fired_per_s": round(distinct / elapsed, 1),
        "completed_per_s": round(succeeded / elapsed, 1),
        "p50_ms": round(p50 * 1000, 1) if p50 is not None else "-",
        "p95_ms": round(p95 * 1000, 1) if p95 is not None else "-",
        "p99_ms": round(p99 * 1000, 1) if p99 is not None else "-",
        "max_ms": round(float(worst) * 1000, 1) if worst is not None else "-",
        "recorded_p50_p99_ms": " / ".join(f"{value * 1000:.1f}" for value in recorded or ()) or "-",
        "lost": max(0, expected - distinct),
        "duplicates": rows - distinct,
        "not_run": distinct - succeeded,
        "cpu_ms_per_fire": " / ".join(
            f"{cpu_used[group] / max(1, distinct) * 1000:.2f}"
            for group in ("workers", "beat", "rest")
        ),
        "profile": sampling.notes if sampling is not None else [],
    }


def _fires_due(created, start, end, schedules: int = SCHEDULES) -> int:
    """How many fires the schedules owe in (start, end]: each fires on the whole seconds after
    its creation instant."""
    created = created.replace(microsecond=0)
    second = timedelta(seconds=1)
    return schedules * max(0, (end - created) // second - (start - created) // second)


def _raw_celery(workers: int, concurrency: int, messages: int = 20000) -> dict:
    from bench.anchor_app import app, noop

    support.reset()
    with app.producer_or_acquire() as producer, producer.batch(max_size=1000):
        for _ in range(messages):
            noop.apply_async(queue="anchor_raw", producer=producer)
    client = support.redis()
    pool = _workers(workers, concurrency, app="bench.anchor_app", queues="anchor_raw", tag="raw")
    while client.llen("anchor_raw") == messages:
        time.sleep(0.01)
    started = time.monotonic()
    while client.llen("anchor_raw") > 0 and time.monotonic() - started < 120:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    time.sleep(1)
    for process in pool:
        support.stop(process)
    return {
        "system": f"raw Celery no-op: {workers}x{concurrency} prefork workers",
        "completed_per_s": round(messages / elapsed, 1),
    }


def run(args: list[str]) -> Result:
    support.setup()
    seconds = _option(args, "seconds", SECONDS)
    combos = stack_defaults.departure_rows(args)
    workers, concurrency = stack_defaults.worker_count_and_concurrency(stack_defaults.DEFAULTS)
    result = Result(
        scenario=NAME,
        columns=[
            "system",
            "offered_per_s",
            "fired_per_s",
            "completed_per_s",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "max_ms",
            "recorded_p50_p99_ms",
            "lost",
            "duplicates",
            "not_run",
            "cpu_ms_per_fire",
        ],
        targets={"sustained": "833 fires/s, p99 schedule-to-start <= 250 ms, 0 lost, 0 duplicated"},
        notes=[
            f"window {seconds} s; schedule-to-start = started_at - scheduled_at of every fire"
            " due in the window; lost = fires due in the window with no row; not_run = rows"
            " that had not succeeded 10 s after the window; recorded = when the beat's row"
            " was written (created_at - scheduled_at; negative: rung ahead of its time, see"
            " SCHEDULER_FIRE_AHEAD_SECONDS); cpu_ms_per_fire ="
            " CPU time (user + system) over the window per fire, of the workers / the beat /"
            " the rest of the machine (PostgreSQL, Redis, the bench's sampling); raw Celery = time"
            " to drain 20,000"
            " no-op messages (prefetched ones counted as drained)"
        ],
    )
    result.notes.append(stack_defaults.defaults_note())
    load_before = os.getloadavg()[0]
    for combo in combos:
        row = _ours(seconds, combo)
        result.add(**{column: row.get(column, "") for column in result.columns})
    raw = _raw_celery(workers, concurrency)
    result.add(**raw)
    # Every second's 833 fires are due at once. Sent one message per task, as plain Celery
    # sends them, the burst alone takes this long to drain on this machine.
    from django.conf import settings

    from scheduler_app.ringing.publish import batch_size

    per_message = batch_size(
        SCHEDULES, settings.SCHEDULER["DOORBELL_BATCH"], processes=workers * concurrency
    )
    result.notes.append(
        f"every second's {SCHEDULES} fires are due at once; one message per task, raw Celery"
        f" drains such a burst of no-op messages in {SCHEDULES / raw['completed_per_s'] * 1000:.0f}"
        f" ms here (ours rings such a burst {settings.SCHEDULER['FIRE_AHEAD_SECONDS']} s ahead"
        f" of its time, in {-(-SCHEDULES // per_message)} messages: one per worker process)"
    )
    # The machine is shared: the 1-minute load average tells how far to trust the figures.
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs; the run itself keeps them busy)"
    )
    return result
