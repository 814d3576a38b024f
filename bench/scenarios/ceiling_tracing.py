"""`bench ceiling --tracing=...`: what tracing costs per fire (see `bench.scenarios.ceiling`).

One step of the ceiling's measurement per mode, at one rate, with the beat and the workers
exporting to a null OTLP sink; CPU per fire of the workers, the beat and both together,
and each against tracing off. On a shared 2-vCPU machine two windows of the same code
differ by more than tracing costs, so the modes are interleaved and repeated (`--rounds`,
3 by default), and each mode is also read against the off window of its own round: the
load that moves one moves the other."""

from __future__ import annotations

import os
import statistics

from bench import stack_defaults
from bench.otlp_sink import NullOtlpSink
from bench.report import Result
from bench.scenarios.run_path_cpu import run_path_cpu
from bench.scenarios.sustained import _option, _ours

MODES = {
    "off": {},
    "full": {"OTEL_TRACES_SAMPLER": "always_on"},
    "default": {},  # the shipped sampler: parentbased_traceidratio, 0.02
}
TRACING_SECONDS = 20
TRACING_RATE = 833
ROUNDS = 3


def _tracing_modes(args: list[str]) -> list[str]:
    for arg in args:
        if arg.startswith("--tracing="):
            modes = [mode for mode in arg.split("=", 1)[1].split(",") if mode]
            unknown = set(modes) - set(MODES)
            if unknown:
                raise SystemExit(f"--tracing: unknown mode(s) {sorted(unknown)}; use {list(MODES)}")
            return modes
    return []


def _rate(args: list[str]) -> int:
    for arg in args:
        if arg.startswith("--rates="):
            return int(arg.split("=", 1)[1].split(",")[0])
    return TRACING_RATE


def _cpu(row: dict) -> tuple[float, float, float]:
    workers, beat, rest = (float(part) for part in row["cpu_ms_per_fire"].split(" / "))
    return workers, beat, rest


def tracing_rows(args: list[str], modes: list[str]) -> Result:
    seconds = _option(args, "seconds", TRACING_SECONDS)
    rounds = _option(args, "rounds", ROUNDS)
    rate = _rate(args)
    # One stack for every mode: the defaults, or the last departure combination asked for.
    combo = stack_defaults.departure_rows(args)[-1]
    result = Result(
        scenario="ceiling-tracing",
        columns=[
            "tracing",
            "rounds",
            "held",
            "fired_per_s",
            "completed_per_s",
            "p99_ms",
            "lost",
            "duplicates",
            "cpu_ms_per_fire",
            "workers_beat_ms_per_fire",
            "spread",
            "vs_off",
            "vs_off_paired",
            "exports",
        ],
        targets={
            "full": "at most +15% CPU per fire (workers + beat) over tracing off",
            "default": "at most +3% CPU per fire (workers + beat) over tracing off",
        },
        notes=[
            f"each mode: {rounds} rounds of a {seconds} s window at {rate} fires/s on the stack"
            f" {stack_defaults.label('', combo).lstrip(', ')} (the ceiling's step), the modes"
            " interleaved (round r starts at the r-th mode, so none is always first);"
            " cpu_ms_per_fire = workers / beat / rest, medians of the rounds, from each"
            " process's CPU clock (user + system of the process tree, psutil), not wall time;"
            " workers_beat_ms_per_fire = median of the rounds' workers + beat, spread = its"
            " lowest - highest round; vs_off = median against off's median; vs_off_paired ="
            " the median (lowest .. highest) of each round's mode against the same round's off;"
            " exports = OTLP requests and bytes the null sink took (median round); held = rounds"
            " that fired every fire owed (0 lost): a round whose beat fell behind (a loaded"
            " machine) spreads the processes' idle CPU over fewer fires, so only held rounds"
            " make the medians, when a mode has any",
            "off: no OTEL_EXPORTER_OTLP_ENDPOINT (no provider, no spans); full: always_on;"
            " default: parentbased_traceidratio 0.02; libraries instrumented: none (the run"
            " path's own spans; as shipped django is added, which the run path never enters)",
        ],
    )
    saved = {name: os.environ.get(name) for name in _names()}
    measured: dict[str, list[dict]] = {mode: [] for mode in modes}
    try:
        for index in range(rounds if "--stack=no" not in args else 0):
            for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
                round_row = _stack_round(mode, seconds, rate, combo)
                measured[mode].append({**round_row, "round": index})
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    _stack_rows(result, measured)
    if "--run-path=no" not in args:
        _run_path_rows(result, list(dict.fromkeys(modes)))
    result.notes.append(f"1-min load average after: {os.getloadavg()[0]:.2f} (2 vCPUs, shared)")
    return result


def _stack_round(mode: str, seconds: int, rate: int, combo: stack_defaults.Combo) -> dict:
    """One window of the stack in `mode`: the ceiling's step, its row, its export counts."""
    sink = NullOtlpSink() if mode != "off" else None
    _environment(mode, sink)
    try:
        row = _ours(seconds, combo, schedules=rate)
    finally:
        if sink is not None:
            sink.close()
    row["cpu"] = _cpu(row)
    row["both"] = row["cpu"][0] + row["cpu"][1]
    row["exports"] = f"{sink.requests} / {sink.bytes // 1024} KiB" if sink else "-"
    print(f"  {mode}: {row['both']:.3f} ms/fire (workers + beat), load {os.getloadavg()[0]:.2f}")
    return row


def _stack_rows(result: Result, measured: dict[str, list[dict]]) -> None:
    """A row per mode: the medians of its held rounds, their spread, and against off."""
    off = _held(measured.get("off") or [])
    off_median = statistics.median(row["both"] for row in off) if off else None
    off_by_round = {row["round"]: row["both"] for row in off}
    for mode, every in measured.items():
        if not every:
            continue
        rows = _held(every)
        both = [row["both"] for row in rows]
        median = statistics.median(both)
        paired = [
            (row["both"] / off_by_round[row["round"]] - 1) * 100
            for row in rows
            if mode != "off" and row["round"] in off_by_round
        ]
        middle = sorted(rows, key=lambda row: row["both"])[len(rows) // 2]
        result.add(
            tracing=mode,
            rounds=" / ".join(
                f"{row['both']:.3f}" + ("" if row["lost"] == 0 else " (behind)") for row in every
            ),
            held=f"{sum(row['lost'] == 0 for row in every)}/{len(every)}",
            fired_per_s=statistics.median(row["fired_per_s"] for row in rows),
            completed_per_s=statistics.median(row["completed_per_s"] for row in rows),
            p99_ms=statistics.median(_number(row["p99_ms"]) for row in rows),
            lost=sum(row["lost"] for row in every),
            duplicates=sum(row["duplicates"] for row in every),
            cpu_ms_per_fire=" / ".join(
                f"{statistics.median(row['cpu'][part] for row in rows):.2f}" for part in range(3)
            ),
            workers_beat_ms_per_fire=f"{median:.3f}",
            spread=f"{min(both):.3f} - {max(both):.3f}",
            vs_off=f"{(median / off_median - 1) * 100:+.1f}%" if off_median else "-",
            vs_off_paired=(
                f"{statistics.median(paired):+.1f}% ({min(paired):+.1f} .. {max(paired):+.1f})"
                if paired
                else "-"
            ),
            exports=middle["exports"],
        )


def _held(rows: list[dict]) -> list[dict]:
    """The rounds that fired every fire owed, or all of them when none did."""
    return [row for row in rows if row["lost"] == 0] or rows


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def _run_path_rows(result: Result, modes: list[str]) -> None:
    """The run path's CPU in one process (`bench.scenarios.run_path_cpu`), per mode."""
    per_run = run_path_cpu(modes)
    off = per_run.get("off")
    for mode, milliseconds in per_run.items():
        result.add(
            tracing=f"{mode} (run path, 1 process)",
            cpu_ms_per_fire=f"{milliseconds:.3f}",
            workers_beat_ms_per_fire=f"{milliseconds:.3f}",
            vs_off=f"{(milliseconds / off - 1) * 100:+.1f}%" if off else "-",
        )
    result.notes.append(
        "rows '(run path, 1 process)': this process fires, rings, claims, runs and finishes"
        " 1,000 noop runs in batches of 20 per round, the modes alternating for 3 rounds,"
        " median CPU per run of the process (its export thread and the null sink included);"
        " steadier than the stack's rows on a shared machine"
    )


def _names() -> list[str]:
    return [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_INSTRUMENTATIONS",
        "OTEL_BSP_SCHEDULE_DELAY",
    ]


def _environment(mode: str, sink: NullOtlpSink | None) -> None:
    """The spawned beat and workers inherit this process's environment (bench.support)."""
    for name in _names():
        os.environ.pop(name, None)
    if sink is None:
        return
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.url
    os.environ["OTEL_INSTRUMENTATIONS"] = "none"
    os.environ.update(MODES[mode])
