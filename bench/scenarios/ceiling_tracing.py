"""`bench ceiling --tracing=...`: what tracing costs per fire (see `bench.scenarios.ceiling`).

One step of the ceiling's measurement per mode, at one rate, with the beat and the workers
exporting to a null OTLP sink; CPU per fire of the workers, the beat and both together,
and each against tracing off."""

from __future__ import annotations

import os

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
WORKERS = 2
CONCURRENCY = 4


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
    rate = _rate(args)
    result = Result(
        scenario="ceiling-tracing",
        columns=[
            "tracing",
            "offered_per_s",
            "fired_per_s",
            "completed_per_s",
            "p99_ms",
            "lost",
            "duplicates",
            "cpu_ms_per_fire",
            "workers_beat_ms_per_fire",
            "vs_off",
            "exports",
        ],
        targets={
            "full": "at most +15% CPU per fire (workers + beat) over tracing off",
            "default": "at most +3% CPU per fire (workers + beat) over tracing off",
        },
        notes=[
            f"each mode: {seconds} s window at {rate} fires/s, 1 beat + {WORKERS}x{CONCURRENCY}"
            " prefork workers (the ceiling's step); cpu_ms_per_fire = workers / beat / rest;"
            " exports = OTLP requests and bytes the null sink took in the mode",
            "off: no OTEL_EXPORTER_OTLP_ENDPOINT (no provider, no spans); full: always_on;"
            " default: parentbased_traceidratio 0.02; libraries instrumented: none (the run"
            " path's own spans; as shipped django is added, which the run path never enters)",
        ],
    )
    saved = {name: os.environ.get(name) for name in _names()}
    baseline = None
    stack = "--stack=no" not in args
    try:
        for mode in modes if stack else []:
            sink = NullOtlpSink() if mode != "off" else None
            _environment(mode, sink)
            try:
                row = _ours(seconds, WORKERS, CONCURRENCY, schedules=rate)
            finally:
                if sink is not None:
                    sink.close()
            workers, beat, _ = _cpu(row)
            both = workers + beat
            if mode == "off" and baseline is None:
                baseline = both  # the first off row; a later one shows the drift
            row.update(
                tracing=mode,
                workers_beat_ms_per_fire=f"{both:.3f}",
                vs_off=f"{(both / baseline - 1) * 100:+.1f}%" if baseline else "-",
                exports=f"{sink.requests} / {sink.bytes // 1024} KiB" if sink else "-",
            )
            result.add(**{column: row.get(column, "") for column in result.columns})
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    _run_path_rows(result, list(dict.fromkeys(modes)))
    result.notes.append(f"1-min load average after: {os.getloadavg()[0]:.2f} (2 vCPUs, shared)")
    return result


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
