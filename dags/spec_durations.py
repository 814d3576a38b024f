"""The one way a DAG definition writes a duration (pure Python: no Django).

An approval's `timeout`, a sleep's `duration`, a sensor's `interval`, `max_interval` and
`timeout` all read the same grammar, so what a person writes on one node type means the same
on another (the approval and timer parsers each had their own once: "1d12h" was a good
approval timeout and a 400 on a sensor, "1.5h" the other way round):

    a number of seconds          90, 2.5, "90"
    parts from the largest unit  "30s", "10m", "2h", "1d", "1d12h", "1h30m", "1.5h", "500ms"

Each unit at most once, largest first (d, h, m, s, ms); "2h1d" and "24 hours" are refused.
The scheduler_sdk's plan reads the same grammar (tests/cli/test_sdk_approval_plan.py holds
the two together).
"""

from __future__ import annotations

import re
from typing import Any

from dags.spec_errors import DagSpecError

UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_UNITS = tuple(UNIT_SECONDS)  # largest first
_PART = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(ms|d|h|m|s)")
_NUMBER = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
# Longer than any duration written by hand: refused before the pattern looks at it.
MAX_DURATION_CHARS = 64


def duration_seconds(value: Any, *, field: str) -> float:
    """Seconds of `value` (see the module); DagSpecError naming `field` otherwise."""
    refused = DagSpecError(
        f"{field} must be a duration such as 30s, 10m, 2h, 1d12h or a number of seconds",
        field=field,
    )
    if isinstance(value, bool):
        raise refused
    if isinstance(value, int | float):
        if value < 0:
            raise refused
        return float(value)
    if not isinstance(value, str) or len(value) > MAX_DURATION_CHARS:
        raise refused
    text = value.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    position, last_unit, total = 0, -1, 0.0
    for part in _PART.finditer(text):
        unit = _UNITS.index(part.group(2))
        if part.start() != position or unit <= last_unit:
            raise refused
        position, last_unit = part.end(), unit
        total += float(part.group(1)) * UNIT_SECONDS[part.group(2)]
    if position == 0 or position != len(text):
        raise refused
    return total
