"""sustained: 833 fires/s offered for 60 s (833 interval schedules of 1 s, python `noop`
handler) through one real beat and real prefork workers; beside it, raw Celery's no-op
throughput on the same broker as the ceiling for this machine."""

from __future__ import annotations

import time

from bench import support
from bench.report import Result

NAME = "sustained"
QUICK = False
DESCRIPTION = "833 fires/s for 60 s end to end: achieved rate, schedule-to-start p50-max, lost, dup"
SCHEDULES = 833
SECONDS = 60
WORKERS = 2
CONCURRENCY = 4


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


def _ours(seconds: int, workers: int, concurrency: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    support.reset()
    created = timezone.now().replace(microsecond=0)
    support.tasks_copy(SCHEDULES, row=lambda i: ("interval", "1s", "UTC", None), created_at=created)
    pool = _workers(workers, concurrency, app="project", queues="critical,normal,bulk", tag="w")
    time.sleep(8)  # workers up
    beat = support.spawn(
        ["-m", "celery", "-A", "project", "beat", "-S", "scheduler_app.beat:LeaderScheduler"],
        log_name="sustained-beat",
    )
    time.sleep(5)  # load, lead, first fires
    window_start = timezone.now()
    time.sleep(seconds)
    window_end = timezone.now()
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
            " max(extract(epoch FROM started_at - scheduled_at))"
            " FROM scheduler_app_taskexecution WHERE scheduled_at > %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        rows, distinct, succeeded, (p50, p95, p99), worst = cursor.fetchone()
    whole_seconds = int(window_end.timestamp()) - int(window_start.timestamp())
    expected = whole_seconds * SCHEDULES
    return {
        "system": f"ours: 1 beat + {workers}x{concurrency} prefork workers",
        "offered_per_s": SCHEDULES,
        "fired_per_s": round(distinct / seconds, 1),
        "completed_per_s": round(succeeded / seconds, 1),
        "p50_ms": round(p50 * 1000, 1) if p50 is not None else "-",
        "p95_ms": round(p95 * 1000, 1) if p95 is not None else "-",
        "p99_ms": round(p99 * 1000, 1) if p99 is not None else "-",
        "max_ms": round(float(worst) * 1000, 1) if worst is not None else "-",
        "lost": max(0, expected - distinct),
        "duplicates": rows - distinct,
        "not_run": distinct - succeeded,
    }


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
    workers = _option(args, "workers", WORKERS)
    concurrency = _option(args, "concurrency", CONCURRENCY)
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
            "lost",
            "duplicates",
            "not_run",
        ],
        targets={"sustained": "833 fires/s, p99 schedule-to-start <= 250 ms, 0 lost, 0 duplicated"},
        notes=[
            f"window {seconds} s; schedule-to-start = started_at - scheduled_at of every fire"
            " due in the window; lost = fires due in the window with no row; not_run = rows"
            " that had not succeeded 10 s after the window; raw Celery = time to drain 20,000"
            " no-op messages (prefetched ones counted as drained)"
        ],
    )
    result.add(**_ours(seconds, workers, concurrency))
    result.add(**_raw_celery(workers, concurrency))
    return result
