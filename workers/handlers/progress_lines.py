"""Progress values and the shell handler's `::progress <percent> [message]` lines (pure: no
Django, like every handler module).

A stdout line `::progress 40 copied 4 of 10 files` is a progress report and is left out of
the log; a line that starts so but whose percent is not a number stays in the log as
written. A percent outside 0..100 is brought within it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from handler_contract.base import HandlerContext

MAX_MESSAGE_CHARS = 500
PROGRESS_LINE = re.compile(r"^::progress[ \t]+([-+]?(?:\d+(?:\.\d*)?|\.\d+))(?:[ \t]+(.*))?$")


def progress_value(percent: Any, message: Any = "") -> tuple[float, str]:
    """A valid (percent, message): percent a finite number, kept within 0..100; message text.
    Raises TypeError/ValueError for anything else (a python handler's mistake)."""
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise TypeError(f"progress percent must be a number, got {percent!r}")
    if not math.isfinite(percent):
        raise ValueError(f"progress percent must be finite, got {percent!r}")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise TypeError(f"progress message must be text, got {type(message).__name__}")
    return round(min(100.0, max(0.0, float(percent))), 2), message[:MAX_MESSAGE_CHARS]


def progress_line_parse(text: str) -> tuple[float, str] | None:
    """(percent, message) for a `::progress` line, else None."""
    match = PROGRESS_LINE.match(text.rstrip())
    if match is None:
        return None
    return progress_value(float(match.group(1)), (match.group(2) or "").strip())


def progress_line_taker(ctx: HandlerContext) -> Callable[[str], bool] | None:
    """For a shell handler's stdout lines: True when the line was a progress report (it is
    then not logged). None when the run has no reporter (every line is logged)."""
    report = ctx.progress
    if report is None:
        return None

    def take(text: str) -> bool:
        parsed = progress_line_parse(text) if text.startswith("::progress") else None
        if parsed is None:
            return False
        report(*parsed)
        return True

    return take
