"""The nemesis' table (`make chaos` writes it to bench/results/nemesis.md): the run, the
faults it drew, what the checker found for each property, and the timeline."""

from __future__ import annotations

import os

from django.utils import timezone

from tests.chaos.history import Verdict
from tests.chaos.nemesis import Nemesis


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    return lines


def render(
    *, seed: int, seconds: float, long: bool, load: str, nemesis: Nemesis, verdict: Verdict
) -> str:
    lines = [
        "# nemesis",
        "",
        f"Measured {timezone.now().isoformat(timespec='seconds')}: seed {seed}, "
        f"{seconds:.0f} s of faults ({'long' if long else 'short'} form), {load}, on a "
        f"{os.cpu_count()}-CPU machine (1-minute load average {os.getloadavg()[0]:.2f} at the "
        "end). Replay with `make chaos SEED=<seed>`.",
        "",
        f"History: {verdict.instants} scheduled instants, {verdict.runs} runs (attempts), "
        f"{verdict.executions} handler executions, {verdict.re_executed} re-executions "
        "accepted (a run executed again after the process that ran it was lost).",
        "",
        "## faults drawn",
        "",
    ]
    lines += _table(
        ["fault", "times", "held_s"],
        [[kind, str(times), f"{held:.1f}"] for kind, times, held in nemesis.fault_table()],
    )
    lines += ["", "## properties (tests/chaos/history.py)", ""]
    lines += _table(
        ["property", "violations", "first violation"],
        [[name, str(count), first or "-"] for name, count, first in verdict.rows()],
    )
    lines += ["", "## timeline", ""]
    lines += _table(
        ["t_s", "fault", "action", "detail"],
        [
            [f"{event.elapsed:.1f}", event.kind, event.action, _detail(event.detail)]
            for event in nemesis.events
        ],
    )
    lines.append("")
    return "\n".join(lines)


def _detail(detail: dict) -> str:
    shown = {key: value for key, value in detail.items() if key != "pids"}
    if "pids" in detail:
        shown["processes"] = len(detail["pids"])
    return ", ".join(f"{key}={value}" for key, value in shown.items()) or "-"
