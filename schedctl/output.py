"""What schedctl prints: aligned tables for people, JSON or YAML for scripts (`-o`),
a diff for `apply`, and a spinner on stderr while it waits (only on a terminal, so a
script's output stays clean)."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
import yaml

from scheduler_sdk.plan import Change, Plan

FORMATS = ("table", "json", "yaml")
output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people; json or yaml for scripts.",
)

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def emit_data(data: Any, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[header.upper() for header, _ in columns]]
    cells += [[_cell(getter(row)) for _, getter in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[Column], fmt: str) -> None:
    if fmt != "table":
        emit_data(list(rows), fmt)
    elif rows:
        click.echo(table(rows, columns))
    else:
        click.echo("No resources found.", err=True)


def key(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


def short_time(value: str | None) -> str | None:
    """`2026-12-01T08:51:51.123456Z` -> `2026-12-01 08:51:51` (tables only; -o keeps all)."""
    if not value:
        return None
    return value.replace("T", " ")[:19]


def schedule_text(schedule: dict[str, Any] | None) -> str:
    if not schedule:
        return "-"
    kind = schedule.get("type")
    if kind == "manual":
        return "manual"
    if kind == "once":
        return f"once {schedule.get('run_at')}"
    text = f"{kind} {schedule.get('expression') or ''}".strip()
    zone = schedule.get("timezone")
    return f"{text} ({zone})" if kind == "cron" and zone and zone != "UTC" else text


# ---- apply -------------------------------------------------------------------------------

_SYMBOLS = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}
_COLOURS = {"create": "green", "update": "yellow", "delete": "red", "unchanged": None}


def _value(value: Any) -> str:
    return json.dumps(value, default=str)


def diff_lines(change: Change) -> Iterable[str]:
    for line in change.diff:
        if line.op == "+":
            yield click.style(f"    + {line.path}: {_value(line.new)}", fg="green")
        elif line.op == "-":
            yield click.style(f"    - {line.path}: {_value(line.old)}", fg="red")
        else:
            yield click.style(
                f"    ~ {line.path}: {_value(line.old)} -> {_value(line.new)}", fg="yellow"
            )


def change_header(change: Change, *, done: bool) -> str:
    verb = {
        "create": "created" if done else "will be created",
        "update": "updated" if done else "will be updated",
        "delete": "deleted" if done else "will be deleted",
        "unchanged": "unchanged",
    }[change.action]
    symbol = _SYMBOLS[change.action]
    return click.style(f"{symbol} {change.kind} {change.name}: {verb}", fg=_COLOURS[change.action])


def plan_text(plan: Plan, *, done: bool, details: bool) -> Iterable[str]:
    for change in plan.changes:
        yield change_header(change, done=done)
        if details and change.action in ("create", "update"):
            yield from diff_lines(change)
    counts = plan.counts()
    summary = ", ".join(f"{counts[action]} {action}" for action in counts if counts[action])
    yield f"{'Applied' if done else 'Plan'}: {summary or 'nothing to do'}"


# ---- waiting -----------------------------------------------------------------------------


class Waiting:
    """A spinner with elapsed seconds on stderr, while `message()` says what is awaited."""

    FRAMES = "|/-\\"

    def __init__(self, message: Callable[[], str]) -> None:
        self.message = message
        self.enabled = sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def __enter__(self) -> Waiting:
        if self.enabled:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def _spin(self) -> None:
        for frame in itertools.cycle(self.FRAMES):
            if self._stop.wait(0.2):
                break
            elapsed = time.monotonic() - self._started
            sys.stderr.write(f"\r{frame} {self.message()} ({elapsed:.0f}s)\033[K")
            sys.stderr.flush()

    def stop(self) -> None:
        if self._thread is not None and not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        self.stop()
