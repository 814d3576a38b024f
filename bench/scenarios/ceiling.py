"""ceiling: the highest sustained fire rate the stack holds on this machine.

The offered rate (interval schedules of 1 s, every one due on the same whole second) rises in
steps, each a fresh run of `bench sustained`'s measurement (1 beat, 2 prefork workers of 4);
the first step whose p99 schedule-to-start passes 250 ms, or that loses or doubles a fire,
ends the climb. Beside it, raw Celery's drain rate of no-op messages on the same workers,
and the CPU each fire costs (workers / beat / the rest: PostgreSQL, Redis).

    python -m bench ceiling [--seconds=30] [--rates=833,1000,1250,1500,1750,2000] [--profile]
    python -m bench ceiling --tracing=off,full,default [--rates=833] [--seconds=20] [--rounds=3]
        [--stack=no] [--run-path=no]

With --tracing, each named mode measures the first rate of --rates (no climb, no raw
Celery row), --rounds times with the modes interleaved (`bench.scenarios.ceiling_tracing`),
the stack exporting its spans to a null OTLP/HTTP sink in this process (`bench.otlp_sink`):
off (no endpoint: tracing off), full (every fire traced, always_on) and default (the shipped
sampler, parentbased_traceidratio 0.02). The table goes to bench/results/ceiling-tracing.md,
with each mode's CPU per fire against off's. --stack=no or --run-path=no leave out the
stack's rows or the one-process run path's.

With --profile, every step's workers and beat are sampled through its window
(`bench.profiling`: the tables go to bench/results/profiles/ceiling-RATE.md, each step's
top areas into the notes); sampling costs CPU of its own, so a profiled climb breaks
earlier than a plain one.
"""

from __future__ import annotations

import os

from bench import stack_defaults, support
from bench.report import Result
from bench.scenarios.ceiling_tracing import _tracing_modes, tracing_rows
from bench.scenarios.sustained import _option, _ours, _raw_celery

NAME = "ceiling"
QUICK = False
DESCRIPTION = "raise the fire rate in steps until p99 schedule-to-start > 250 ms or a loss"
RATES = (833, 1000, 1250, 1500, 1750, 2000)
SECONDS = 30
P99_LIMIT_MS = 250.0


def _rates(args: list[str]) -> list[int]:
    for arg in args:
        if arg.startswith("--rates="):
            return [int(rate) for rate in arg.split("=", 1)[1].split(",") if rate]
    return list(RATES)


def _held(row: dict) -> bool:
    return support.rate_held(row, p99_limit_ms=P99_LIMIT_MS)


def run(args: list[str]) -> Result:
    support.setup()
    modes = _tracing_modes(args)
    if modes:
        return tracing_rows(args, modes)
    seconds = _option(args, "seconds", SECONDS)
    result = Result(
        scenario=NAME,
        columns=[
            "system",
            "offered_per_s",
            "fired_per_s",
            "completed_per_s",
            "p50_ms",
            "p99_ms",
            "max_ms",
            "lost",
            "duplicates",
            "not_run",
            "cpu_ms_per_fire",
            "held",
        ],
        targets={
            "ceiling": "the highest rate held (p99 <= 250 ms, 0 lost, 0 doubled) >= 1.5x raw"
            " Celery's no-op drain rate on the same workers"
        },
        notes=[
            f"each step: {seconds} s window, 1 beat + the stack's workers (a row says which),"
            " interval schedules of 1 s all due on the same whole second; held = p99"
            f" schedule-to-start <= {P99_LIMIT_MS:.0f} ms, 0 lost, 0 duplicated, all run;"
            " cpu_ms_per_fire = CPU per fire of the workers / the beat / the rest of the"
            " machine (PostgreSQL, Redis, the bench's sampling)"
        ],
    )
    result.notes.append(stack_defaults.defaults_note())
    load_before = os.getloadavg()[0]
    profiled = "--profile" in args
    highest_by_combo = {}
    for combo in stack_defaults.departure_rows(args):
        highest = 0
        for rate in _rates(args):
            row = _ours(
                seconds, combo, schedules=rate, profile=f"{NAME}-{rate}" if profiled else None
            )
            result.notes += row["profile"]
            row["held"] = "yes" if _held(row) else "no"
            result.add(**{column: row.get(column, "") for column in result.columns})
            if row["held"] != "yes":
                break
            highest = rate
        highest_by_combo[stack_defaults.label("highest rate held", combo)] = highest
    workers, concurrency = stack_defaults.worker_count_and_concurrency(stack_defaults.DEFAULTS)
    raw = _raw_celery(workers, concurrency)
    result.add(**{column: raw.get(column, "") for column in result.columns})
    for name, highest in highest_by_combo.items():
        ratio = highest / raw["completed_per_s"] if raw["completed_per_s"] else 0.0
        result.notes.append(
            f"{name}: {highest}/s = {ratio:.2f}x raw Celery's no-op drain"
            f" ({raw['completed_per_s']}/s, {workers}x{concurrency} workers)"
        )
    result.notes.append(
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        " (2 vCPUs shared with other work: a loaded machine lowers every figure)"
    )
    return result
