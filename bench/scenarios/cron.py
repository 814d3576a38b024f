"""cron: next-fire computations per second on a mixed set of expressions,
ours (compiled, cached) vs croniter vs cronsim, each walking the same expressions."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from bench.report import Result

NAME = "cron"
QUICK = True
DESCRIPTION = "next-fire computations/s: ours vs croniter vs cronsim (mixed expressions, UTC+zoned)"

EXPRESSIONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9-17 * * 1-5",
    "15,45 */2 * * *",
    "0 0 1 * *",
    "0 12 * * 0",
    "0 0 29 2 *",
    "5 4 1-7 * 1",
    "0 22 * * 1-5",
    "*/15 8-18 * * *",
]
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"]
STEPS = 200  # successive fires walked per (expression, zone)
START = datetime(2026, 3, 1, tzinfo=UTC)


def _ours() -> int:
    from schedules import parse_schedule

    count = 0
    for zone in ZONES:
        for expression in EXPRESSIONS:
            schedule = parse_schedule(schedule_type="cron", expression=expression, timezone=zone)
            moment = START
            for _ in range(STEPS):
                moment = schedule.next_after(moment)
                count += 1
    return count


def _croniter() -> int:
    from croniter import croniter

    count = 0
    for zone in ZONES:
        tz = ZoneInfo(zone)
        for expression in EXPRESSIONS:
            iterator = croniter(expression, START.astimezone(tz))
            for _ in range(STEPS):
                iterator.get_next(datetime)
                count += 1
    return count


def _cronsim() -> int:
    from cronsim import CronSim

    count = 0
    for zone in ZONES:
        tz = ZoneInfo(zone)
        for expression in EXPRESSIONS:
            iterator = CronSim(expression, START.astimezone(tz))
            for _ in range(STEPS):
                next(iterator)
                count += 1
    return count


def _measure(function, repeats: int = 3) -> float:
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        count = function()
        best = max(best, count / (time.perf_counter() - started))
    return best


def run(args: list[str]) -> Result:
    from bench import support

    support.setup()
    result = Result(
        scenario=NAME,
        columns=["implementation", "next_fires_per_s", "relative"],
        notes=[
            f"{len(EXPRESSIONS)} expressions x {len(ZONES)} zones x {STEPS} successive fires;"
            " best of 3 runs; ours includes DST handling per ARCHITECTURE §6"
        ],
    )
    rates = {
        "ours (schedules)": _measure(_ours),
        "croniter 7.0.0": _measure(_croniter),
        "cronsim 2.8": _measure(_cronsim),
    }
    base = rates["croniter 7.0.0"]
    for name, rate in rates.items():
        result.add(
            implementation=name, next_fires_per_s=round(rate), relative=f"{rate / base:.1f}x"
        )
    return result
