"""scale: 100k (quick) and 1M (full) schedules: load time, resident memory, tick cost.

Each size is measured in a fresh process (so RSS is the scheduler's own): the engine loads
every schedule from PostgreSQL into its heap, computing each next fire (next_fire_at is
left empty, the worst case), then the cost of a tick is measured with nothing due (what a
standby and an idle leader pay) and with 1,000 fires due (recorded and published).

Each size is measured again as one beat of SCHEDULER_SHARDS=4 (`beat.shards`): four engines,
each loading its shard, all four led by this process (a beat that alone leads every shard:
the most any beat does), ticked together.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

from bench import support
from bench.report import Result
from bench.scenarios.cron import EXPRESSIONS, ZONES

NAME = "scale"
QUICK = True
DESCRIPTION = "100k (quick) / 100k+1M (full) schedules: load time, RSS, tick cost"
DUE_PER_TICK = 1000
INTERVALS = ["30s", "1m", "5m", "15m", "1h", "6h", "1d"]
SHARDS = 4


def _populate(count: int) -> None:
    from django.utils import timezone

    support.reset()
    now = timezone.now()

    def row(index: int):
        if index < DUE_PER_TICK:
            # The probe makes these due for its measured tick (a yearly cron: once only).
            return ("cron", "0 0 1 1 *", "UTC", None)
        if index % 10 < 3:
            return ("interval", INTERVALS[index % len(INTERVALS)], "UTC", None)
        expression = EXPRESSIONS[index % len(EXPRESSIONS)]
        return ("cron", expression, ZONES[(index // 10) % len(ZONES)], None)

    # Created a minute ago: outside the change feed's re-read overlap, as a standing fleet is.
    support.tasks_copy(count, row=row, created_at=now - timedelta(seconds=60))


def probe(shards: int = 1) -> None:
    """Runs in its own process: prints one JSON line of measurements."""
    import psutil

    support.setup()
    from django.db import connection
    from django.utils import timezone

    from beat.engine import EngineConfig, SchedulerEngine
    from beat.lock import LeaderLock
    from beat.shards import BeatRoster, ShardSet
    from scheduler_app.models import TaskDefinition
    from scheduler_app.redis_client import get_redis
    from scheduler_app.shard_keys import shard_key_prefix

    process = psutil.Process()
    connection.ensure_connection()
    rss_before = process.memory_info().rss
    config = EngineConfig(
        tick_seconds=0.5,
        batch_size=2000,
        catchup_window_seconds=300,
        requeue_grace_seconds=300,
        housekeeping_seconds=3600,
        lock_ttl_seconds=30,
    )
    engines = [
        SchedulerEngine(
            lock=LeaderLock(
                get_redis(),
                key_prefix=shard_key_prefix("bench:scale:", index),
                node_id=f"scale/shard-{index}",
                ttl_seconds=30,
            ),
            config=config,
            shard=(index, shards),
        )
        for index in range(shards)
    ]
    beat = (
        ShardSet(
            engines,
            roster=BeatRoster(get_redis(), key_prefix="bench:scale:", node_id="scale", ttl=90),
            lock_ttl=30,
        )
        if shards > 1
        else engines[0]
    )
    started = time.perf_counter()
    loaded = beat.load()
    load_seconds = time.perf_counter() - started
    rss_after = process.memory_info().rss
    # Schedules due within two minutes are moved past them (what firing them would do), so
    # that the idle ticks below are idle and the measured tick fires exactly 1,000.
    horizon = timezone.now() + timedelta(seconds=120)
    for engine in engines:
        for entry in engine.heap.pop_due(horizon, len(engine.heap)):
            engine.heap.reschedule(entry, entry.schedule.next_after(horizon))
    # Idle ticks: follow the change feed, try the lock(s), nothing due.
    for engine in engines:
        engine.lock.try_acquire()
    beat.tick()
    idle = []
    for _ in range(20):
        started = time.perf_counter()
        beat.tick()
        idle.append(time.perf_counter() - started)
    names = [f"s{index}" for index in range(DUE_PER_TICK)]
    due_now = timezone.now()
    for task_id in TaskDefinition.platform.filter(name__in=names).values_list("id", flat=True):
        for engine in engines:
            entry = engine.heap.get(task_id)
            if entry is not None:
                engine.heap.reschedule(entry, due_now)

    def fired() -> int:
        return sum(engine.fired_total for engine in engines)

    started = time.perf_counter()
    while fired() < DUE_PER_TICK and time.perf_counter() - started < 30:
        beat.tick()
    firing = time.perf_counter() - started
    for engine in engines:
        engine.lock.release()
    print(
        json.dumps(
            {
                "loaded": loaded,
                "load_seconds": load_seconds,
                "rss_mib": rss_after / 2**20,
                "rss_delta_mib": (rss_after - rss_before) / 2**20,
                "idle_tick_ms": sorted(idle)[len(idle) // 2] * 1000,
                "fire_tick_ms": firing * 1000,
                "fired": fired(),
            }
        )
    )


def run(args: list[str]) -> Result:
    support.setup()
    sizes = [100_000, 1_000_000] if support.is_full(args) else [100_000]
    result = Result(
        scenario=NAME,
        columns=[
            "schedules",
            "shards",
            "insert_s",
            "load_s",
            "rss_mib",
            "rss_delta_mib",
            "idle_tick_ms",
            "tick_1000_due_ms",
        ],
        targets={"scale": "1M loaded in <= 30 s within <= 1 GiB RSS; tick cost flat 100k -> 1M"},
        notes=[
            "load computes every schedule's next fire (next_fire_at empty);"
            " 70% cron (12 expressions x 4 zones), 30% intervals; idle tick = median of 20;"
            " tick_1000_due = recording and publishing 1,000 due fires; before the tick"
            " measurements, schedules due in the next 2 min are moved past them (so the idle"
            " tick is idle: at 1M, 30 s/1 min schedules otherwise fire thousands a second)",
            f"shards {SHARDS}: one beat process with SCHEDULER_SHARDS={SHARDS} leading all of"
            " them (four engines, each loading and ticking its shard); every beat of a sharded"
            " deployment keeps every shard warm, so its RSS is the whole heap's",
        ],
    )
    for count in sizes:
        started = time.perf_counter()
        _populate(count)
        insert_seconds = time.perf_counter() - started
        for shards in (1, SHARDS):
            output = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"from bench.scenarios.scale import probe; probe({shards})",
                ],
                cwd=support.ROOT,
                env=support.service_env(),
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            lines = [line for line in output.stdout.splitlines() if line.startswith("{")]
            if not lines:
                result.notes.append(f"{count} x {shards}: probe failed: {output.stderr[-500:]}")
                continue
            measured = json.loads(lines[-1])
            result.add(
                schedules=measured["loaded"],
                shards=shards,
                insert_s=round(insert_seconds, 1) if shards == 1 else "",
                load_s=round(measured["load_seconds"], 2),
                rss_mib=round(measured["rss_mib"]),
                rss_delta_mib=round(measured["rss_delta_mib"]),
                idle_tick_ms=round(measured["idle_tick_ms"], 2),
                tick_1000_due_ms=round(measured["fire_tick_ms"], 1),
            )
    return result
