"""`bench trace_instructions`: what tracing costs the run path, in instructions.

The run path of `bench.scenarios.run_path_cpu` (fire, ring, claim, noop handler, finish, in
batches of 20), each mode in a process of its own under valgrind's callgrind, counting only
the measured pass: the process starts with instrumentation off, and a two-function C helper
(compiled here from callgrind.h's client requests) switches it on, zeroes the counts before
the pass and dumps them after it, once the spans are exported (the batch processor's thread
included: callgrind counts every thread of the process). The OTLP sink is a process of its
own, so only what the scheduler's process does is counted. An instruction count does not
move with the machine's load, which CPU time on a shared 2-vCPU machine does by a third
between two runs of the same code; it is not a time (a cache miss costs more than an add),
but the traced and untraced passes run the same kind of Python code.

    python -m bench trace_instructions [--runs=400] [--modes=off,full,default]

The dumps stay in bench/results/profiles/trace-instructions/ for `callgrind_annotate`.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import RESULTS_DIR, Result

NAME = "trace_instructions"
QUICK = False
DESCRIPTION = "the run path's instructions per run, tracing off / full / default (callgrind)"
RUNS = 200
MODES = ("off", "full", "default")
DUMPS = RESULTS_DIR / "profiles" / "trace-instructions"
TARGETS = {"full": 15.0, "default": 3.0}
GUESSED_SLOWDOWN = 50  # until the first untraced pass has measured it

_MARKS_C = r"""
#include <valgrind/callgrind.h>
void marks_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void marks_zero(void) { CALLGRIND_ZERO_STATS; }
void marks_stop(const char *name) { CALLGRIND_DUMP_STATS_AT(name); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def _option(args: list[str], name: str, default: str) -> str:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return default


def run(args: list[str]) -> Result:
    if shutil.which("valgrind") is None or shutil.which("cc") is None:
        raise SystemExit("trace_instructions needs valgrind (callgrind) and a C compiler")
    runs = int(_option(args, "runs", str(RUNS)))
    modes = [mode for mode in _option(args, "modes", ",".join(MODES)).split(",") if mode]
    DUMPS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as build:
        marks = Path(build) / "marks.so"
        source = Path(build) / "marks.c"
        source.write_text(_MARKS_C)
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", marks, source], check=True)
        native = subprocess.run(
            [sys.executable, "-m", "bench.scenarios.trace_instructions", "--native", str(runs)],
            check=True,
            capture_output=True,
            text=True,
        )
        native_seconds = float(native.stdout.split()[-1])
        counts = {mode: _count(mode, runs, marks, native_seconds) for mode in modes}
    result = Result(
        scenario="trace-instructions",
        columns=["tracing", "runs", "instructions_per_run", "vs_off", "target", "slowdown"],
        targets={
            mode: f"at most +{limit:g}% instructions per run over off"
            for mode, limit in TARGETS.items()
        },
        notes=[
            f"each mode: one process under callgrind, a warm pass then {runs} noop runs counted"
            " (fire, ring, claim, handler, finish, in batches of 20; the spans exported over"
            " OTLP/HTTP to a null sink in another process, flushed before the count is read);"
            " off: no provider; full: always_on; default: parentbased_traceidratio 0.02 (ids"
            " from a seeded generator: the same runs are sampled every time); no library"
            " instrumented (the run path's own spans)",
            "slowdown: how much slower an untraced pass ran under callgrind than natively (CPU"
            " time); the run path's clocks are stretched by it (the steps' 5 ms rule, the"
            " batch's spill watch, the run watcher's polls and flushes), so what it does on a"
            " timer happens as often a run as at native speed (roughly: the native pass's CPU"
            " time moves with the machine's load)",
            "instructions, not time: the same on a loaded machine; PostgreSQL's and Redis's"
            " work is in other processes and not counted (the traced path sends them the same"
            " statements and commands, its rows carry a 55-byte traceparent)",
            f"dumps for callgrind_annotate: {DUMPS.relative_to(RESULTS_DIR.parent.parent)}/",
            f"1-min load average: {os.getloadavg()[0]:.2f} (does not move the counts)",
        ],
    )
    off = counts.get("off")
    for mode, count in counts.items():
        result.add(
            tracing=mode,
            runs=runs,
            instructions_per_run=f"{count / runs:,.0f}",
            vs_off=f"{(count / off - 1) * 100:+.1f}%" if off else "-",
            target=f"+{TARGETS[mode]:g}%" if mode in TARGETS else "",
            slowdown=_slowdown(mode),
        )
    return result


def _count(mode: str, runs: int, marks: Path, native_seconds: float) -> int:
    out = DUMPS / f"callgrind.{mode}"
    for old in DUMPS.glob(f"callgrind.{mode}*"):
        old.unlink()
    with open(DUMPS / f"callgrind.{mode}.log", "w") as log:
        _callgrind(mode, runs, marks, native_seconds, out, log)
    dumps = [path for path in DUMPS.glob(f"callgrind.{mode}.*") if _total(path) is not None]
    if len(dumps) != 1:
        raise SystemExit(f"trace_instructions: expected one dump for {mode}, found {dumps}")
    dumps[0].rename(out)
    for leftover in DUMPS.glob(f"callgrind.{mode}.[0-9]*"):
        leftover.unlink()
    return _total(out) or 0


def _callgrind(mode: str, runs: int, marks: Path, native_seconds: float, out: Path, log) -> None:
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}.%p",
            sys.executable,
            "-m",
            "bench.scenarios.trace_instructions",
            "--child",
            mode,
            str(runs),
            str(marks),
            str(native_seconds),
        ],
        check=True,
        stderr=log,
    )


def _slowdown(mode: str) -> str:
    found = re.search(r"(\d+)x slower", (DUMPS / f"callgrind.{mode}.log").read_text())
    return f"{found.group(1)}x" if found else "?"


def _total(path: Path) -> int | None:
    """The dump's total instructions, or None for the empty dump callgrind writes at exit."""
    text = path.read_text(errors="replace")
    if "desc: Trigger: Client Request" not in text:
        return None
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _untraced_seconds(one_pass) -> float:
    """CPU seconds of a second untraced pass (the first warms caches, statements, imports)."""
    one_pass()
    started = time.process_time()
    one_pass()
    return time.process_time() - started


def _native(runs: int) -> None:
    """Outside valgrind: an untraced pass's CPU seconds, printed."""
    from bench import support

    support.setup()
    from bench.scenarios.run_path_cpu import run_path_pass

    print(f"{_untraced_seconds(run_path_pass(runs)):.6f}")


def _dilate(factor: float) -> None:
    """The run path's clocks stretched by `factor`: what it does on a timer (the steps' 5 ms
    rule, the batch's spill watch, the run watcher's cancel polls and log flushes) then
    happens as often a run as at native speed, though the code runs `factor` times slower."""
    from django.conf import settings

    import tracing.steps
    import workers.run_watch

    for module, name in (
        (tracing.steps, "STEP_GAP_NS"),
        (workers.run_watch, "FLUSH_SECONDS"),
        (workers.run_watch, "IDLE_WAKE_SECONDS"),
        (workers.run_watch, "RENEW_RETRY_SECONDS"),
    ):
        native = _NATIVE.setdefault(f"{module.__name__}.{name}", getattr(module, name))
        setattr(module, name, type(native)(native * factor))
    for table, name in (
        (settings.WORKER, "BATCH_SPILL_SECONDS"),
        (settings.FLEET, "CANCEL_POLL_SECONDS"),
    ):
        native = _NATIVE.setdefault(name, table[name])
        table[name] = native * factor


_NATIVE: dict[str, float] = {}


def _child(mode: str, runs: int, marks_path: str, native_seconds: float) -> None:
    """Runs inside valgrind: two untraced passes (the second timed, to stretch the run
    path's clocks by how much slower it runs here), a traced warm pass, the counted one."""
    import ctypes

    from bench import support

    support.setup()
    from bench.scenarios.run_path_cpu import run_path_pass, tracing_mode_start
    from tracing.setup import tracing_flush, tracing_stop

    marks = ctypes.CDLL(marks_path)
    marks.marks_on()  # instrumented from here (counted only after the zeroing)
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.otlp_sink"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = sink.stdout.readline().strip()
    provider = None
    try:
        one_pass = run_path_pass(runs)
        _dilate(GUESSED_SLOWDOWN)
        slowdown = _untraced_seconds(one_pass) / native_seconds
        _dilate(slowdown)
        print(f"{mode}: {slowdown:.0f}x slower under callgrind", file=sys.stderr)
        if mode != "off":
            provider = tracing_mode_start(mode, url)
        random.seed(33)  # the SDK's ids (hence the 2 % sampled) the same every time
        one_pass()  # warm: the tracing's first spans, its first export
        tracing_flush(provider, 60_000)
        marks.marks_zero()
        one_pass()
        tracing_flush(provider, 60_000)
        marks.marks_stop(mode.encode())
    finally:
        if provider is not None:
            tracing_stop(provider)
        sink.stdin.close()
        sink.wait()
    support.reset()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    elif sys.argv[1:2] == ["--native"]:
        _native(int(sys.argv[2]))
