"""Cron text -> `CronSpec`: the allowed values of every field, validated.

Grammar (case-insensitive):
  * 5 fields `minute hour day-of-month month day-of-week`, or 6 fields with seconds FIRST.
  * per field a comma list of `*`, `?` (same as `*`), `N`, `A-B`, with an optional `/STEP`
    (`*/15`, `1-30/5`, `5/10` = from 5 to the field's maximum); month and weekday names.
  * day-of-month extras: `L` (last day), `L-N` (N days before the last), `NW` (weekday nearest
    to day N, within the month), `LW` (last weekday of the month).
  * day-of-week extras: `NL` / `FRIL` (last such weekday of the month), `N#K` / `MON#2`
    (K-th such weekday). Sunday is 0 or 7.
  * macros `@yearly @annually @monthly @weekly @daily @midnight @hourly`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from schedules.errors import expression_error

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


SECOND = FieldInfo("second", 0, 59)
MINUTE = FieldInfo("minute", 0, 59)
HOUR = FieldInfo("hour", 0, 23)
DAY_OF_MONTH = FieldInfo("day-of-month", 1, 31)
MONTH = FieldInfo("month", 1, 12, MONTH_NAMES)
# 7 is accepted as a second spelling of Sunday and folded onto 0 after expansion.
DAY_OF_WEEK = FieldInfo("day-of-week", 0, 7, WEEKDAY_NAMES)


@dataclass(frozen=True, slots=True)
class DayOfMonthSpec:
    days: frozenset[int]
    last_minus: frozenset[int]  # `L` -> 0, `L-3` -> 3
    nearest_weekday: frozenset[int]  # `15W` -> 15
    last_weekday: bool  # `LW`
    star: bool  # text starts with `*` or `?` (Vixie's DOM_STAR)


@dataclass(frozen=True, slots=True)
class DayOfWeekSpec:
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    nth: frozenset[tuple[int, int]]  # `1#2` -> (1, 2)
    last: frozenset[int]  # `5L` -> 5
    star: bool  # text starts with `*` or `?` (Vixie's DOW_STAR)


@dataclass(frozen=True, slots=True)
class CronSpec:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    day_of_month: DayOfMonthSpec
    day_of_week: DayOfWeekSpec
    # Minute or hour field starts with `*` (Vixie's MIN_STAR|HR_STAR): follow the wall clock
    # across DST (see cron.py).
    follows_wall_clock: bool


_ITEM = re.compile(r"^(?P<start>[*?]|[A-Z0-9]+)(?:-(?P<end>[A-Z0-9]+))?(?:/(?P<step>.*))?$")
_LAST_MINUS = re.compile(r"^L(?:-(?P<offset>[0-9]+))?$")
_NEAREST = re.compile(r"^(?P<day>[0-9]+)W$")
_DOW_LAST = re.compile(r"^(?P<weekday>[A-Z]+|[0-9]+)L$")
_DOW_NTH = re.compile(r"^(?P<weekday>[A-Z]+|[0-9]+)#(?P<nth>.*)$")


def expand_macro(text: str) -> str:
    """Return the 5-field equivalent of a macro, or `text` unchanged when it is not one."""
    if not text.startswith("@"):
        return text
    key = text.lower()
    if key == "@reboot":
        raise expression_error("@reboot is not a time-based schedule")
    try:
        return MACROS[key]
    except KeyError:
        known = " ".join(MACROS)
        raise expression_error(f"unknown macro {text!r}; expected one of {known}") from None


def parse_cron(expression: str) -> CronSpec:
    """Parse and validate a cron expression; raise ScheduleError naming what is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise expression_error("cron expression is required")
    text = expand_macro(expression.strip())
    parts = text.upper().split()
    if len(parts) == 5:
        second_text = "0"
    elif len(parts) == 6:
        second_text, parts = parts[0], parts[1:]
    elif len(parts) == 7:
        raise expression_error(
            "7 fields (a year field) are not supported; use 5 fields, or 6 with seconds first"
        )
    else:
        raise expression_error(
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with "
            f"seconds first, got {len(parts)}"
        )
    minute_text, hour_text, dom_text, month_text, dow_text = parts
    return CronSpec(
        seconds=_field_values(second_text, SECOND.name),
        minutes=_field_values(minute_text, MINUTE.name),
        hours=_field_values(hour_text, HOUR.name),
        months=_field_values(month_text, MONTH.name),
        day_of_month=_parse_day_of_month(dom_text),
        day_of_week=_parse_day_of_week(dow_text),
        follows_wall_clock=_is_star(minute_text) or _is_star(hour_text),
    )


_FIELDS = {info.name: info for info in (SECOND, MINUTE, HOUR, MONTH)}


# Field texts repeat across expressions ("*", "0", "*/5"): parse each distinct one once.
@lru_cache(maxsize=8192)
def _field_values(text: str, field_name: str) -> tuple[int, ...]:
    return tuple(sorted(parse_field(text, _FIELDS[field_name])))


def _is_star(text: str) -> bool:
    return text.startswith(("*", "?"))


def _items(text: str, info: FieldInfo) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise expression_error(f"{info.name} field {text!r} has an empty list item")
    return items


def parse_field(text: str, info: FieldInfo) -> set[int]:
    """Expand a plain field (no L/W/# extensions) to its set of allowed values."""
    values: set[int] = set()
    for item in _items(text, info):
        values |= _parse_item(item, info)
    return values


def _parse_item(item: str, info: FieldInfo) -> set[int]:
    match = _ITEM.match(item)
    if match is None:
        raise expression_error(f"{info.name} field: invalid item {item!r}")
    start_text, end_text, step_text = match.group("start", "end", "step")
    if start_text in ("*", "?"):
        if end_text is not None:
            raise expression_error(f"{info.name} field: invalid item {item!r}")
        start, end = info.low, 6 if info is DAY_OF_WEEK else info.high
    else:
        start = _value(start_text, info)
        if end_text is not None:
            end = _value(end_text, info)
        elif step_text is not None:  # `a/n`: from a to the field's maximum
            if info is DAY_OF_WEEK:
                start %= 7  # `7/2` is `SUN/2`, i.e. `0/2`
            end = 6 if info is DAY_OF_WEEK else info.high
        else:
            end = start
    if start > end:
        raise expression_error(
            f"{info.name} field: range {start}-{end} is reversed (start after end)"
        )
    step = 1 if step_text is None else _step(step_text, info)
    values = set(range(start, end + 1, step))
    if info is DAY_OF_WEEK and 7 in values:
        values.discard(7)
        values.add(0)
    return values


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _value(text: str, info: FieldInfo) -> int:
    if _is_number(text):
        number = int(text)
        if not info.low <= number <= info.high:
            raise expression_error(
                f"{info.name} field value {number} out of range {info.low}-{info.high}"
            )
        return number
    if info.names is not None and text in info.names:
        return info.names[text]
    if info.names is not None and text.isalpha():
        raise expression_error(f"{info.name} field: unknown name {text!r}")
    raise expression_error(f"{info.name} field: invalid value {text!r}")


def _step(text: str, info: FieldInfo) -> int:
    if not _is_number(text) or int(text) == 0:
        raise expression_error(f"{info.name} field: step must be a positive integer, got {text!r}")
    return int(text)


@lru_cache(maxsize=4096)
def _parse_day_of_month(text: str) -> DayOfMonthSpec:
    days: set[int] = set()
    last_minus: set[int] = set()
    nearest: set[int] = set()
    last_weekday = False
    for item in _items(text, DAY_OF_MONTH):
        if item == "LW":
            last_weekday = True
        elif (match := _LAST_MINUS.match(item)) is not None:
            offset = int(match.group("offset") or 0)
            if offset > 30:
                raise expression_error(f"day-of-month field: L-{offset} offset out of range 0-30")
            last_minus.add(offset)
        elif (match := _NEAREST.match(item)) is not None:
            nearest.add(_value(match.group("day"), DAY_OF_MONTH))
        elif "L" in item or "W" in item:
            raise expression_error(
                f"day-of-month field: invalid item {item!r} (use L, L-N, LW or NW like 15W)"
            )
        else:
            days |= _parse_item(item, DAY_OF_MONTH)
    return DayOfMonthSpec(
        days=frozenset(days),
        last_minus=frozenset(last_minus),
        nearest_weekday=frozenset(nearest),
        last_weekday=last_weekday,
        star=_is_star(text),
    )


def _weekday(text: str) -> int:
    return _value(text, DAY_OF_WEEK) % 7


@lru_cache(maxsize=4096)
def _parse_day_of_week(text: str) -> DayOfWeekSpec:
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in _items(text, DAY_OF_WEEK):
        if item == "L":
            raise expression_error(
                "day-of-week field: 'L' needs a weekday, e.g. 5L or FRIL for the last Friday"
            )
        if (match := _DOW_LAST.match(item)) is not None:
            last.add(_weekday(match.group("weekday")))
        elif (match := _DOW_NTH.match(item)) is not None:
            nth_text = match.group("nth")
            if not _is_number(nth_text) or not 1 <= int(nth_text) <= 5:
                raise expression_error(
                    f"day-of-week field: '#{nth_text}' must be a number 1-5 (e.g. MON#2)"
                )
            nth.add((_weekday(match.group("weekday")), int(nth_text)))
        else:
            weekdays |= _parse_item(item, DAY_OF_WEEK)
    return DayOfWeekSpec(
        weekdays=frozenset(weekdays),
        nth=frozenset(nth),
        last=frozenset(last),
        star=_is_star(text),
    )
