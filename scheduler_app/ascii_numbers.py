"""Numbers a person typed (a query parameter, a path segment), read strictly.

`str.isdigit()` is the wrong guard before `int()`: "²".isdigit() is true and int() refuses it
(a 500), "٣".isdigit() is true and int() reads it as 3; and int() refuses more than 4,300
digits. Every guard of user text goes through `ascii_int` instead.
"""

from __future__ import annotations


def ascii_int(text: str, *, low: int, high: int) -> int | None:
    """`text` as an int from `low` to `high` (non-negative bounds), or None: ASCII digits
    only, and never more of them than `high` has."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(high)):
        return None
    value = int(text)
    return value if low <= value <= high else None
