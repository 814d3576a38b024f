"""The compiled cron evaluator: naive wall-clock "next match at or after" in O(fields).

Every time field becomes a lookup table `next_ge[v]` = smallest allowed value >= v, or -1
(one slot past the field's maximum is always -1, so an overflowing carry needs no check).
The search walks year -> month -> day -> hour -> minute -> second, jumping straight to the
next allowed value at each level and carrying into the level above when a field runs out;
it never steps minute by minute. Time zones are not handled here (see cron.py).
"""

from __future__ import annotations

from datetime import date, datetime
from functools import lru_cache

from schedules.cron_days import MONTH_LENGTHS, day_rule, is_leap, next_value_table
from schedules.cron_syntax import CronSpec, parse_cron
from schedules.errors import expression_error

MAX_YEAR = 9999
_MONTH_NAMES = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

WallTime = tuple[int, int, int, int, int, int]


@lru_cache(maxsize=1024)
def _table(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    return next_value_table(values, size)


class CompiledCron:
    """A parsed expression with its lookup tables. Immutable once built; shared via cache."""

    __slots__ = (
        "_day_rule",
        "_day_tables",
        "_first_hour",
        "_first_minute",
        "_first_month",
        "_first_second",
        "_hours",
        "_minutes",
        "_months",
        "_seconds",
        "_uses_weekday",
        "follows_wall_clock",
        "spec",
    )

    def __init__(self, spec: CronSpec) -> None:
        self.spec = spec
        self.follows_wall_clock = spec.follows_wall_clock
        self._seconds = _table(spec.seconds, 61)
        self._minutes = _table(spec.minutes, 61)
        self._hours = _table(spec.hours, 25)
        self._months = _table(spec.months, 14)
        self._first_second = spec.seconds[0]
        self._first_minute = spec.minutes[0]
        self._first_hour = spec.hours[0]
        self._first_month = spec.months[0]
        self._day_rule = day_rule(spec.day_of_month, spec.day_of_week)
        self._uses_weekday = self._day_rule.uses_weekday
        self._day_tables = self._day_rule.tables  # shared memo: length * 8 + weekday of 1st
        if not any(self._day_rule.can_match(month) for month in spec.months):
            # Every (length, weekday of the 1st) of every month occurs within 400 years.
            months = ", ".join(_MONTH_NAMES[month] for month in spec.months)
            raise expression_error(
                f"expression never fires: no day in {months} satisfies the day-of-month and "
                "day-of-week fields"
            )

    def _day_table(self, year: int, month: int) -> tuple[int, ...]:
        length = 29 if month == 2 and is_leap(year) else MONTH_LENGTHS[month][0]
        if self._uses_weekday:
            key = length * 8 + date(year, month, 1).toordinal() % 7  # 0 = Sunday
        else:
            key = length * 8
        table = self._day_tables.get(key)
        if table is None:
            table = self._day_rule.table(length, key - length * 8)
        return table

    # -- evaluation -----------------------------------------------------------------------

    def next_match_from(self, start: datetime) -> WallTime | None:
        """First wall time >= `start` (its wall-clock fields, whole seconds) that matches."""
        return self.next_match(
            start.year, start.month, start.day, start.hour, start.minute, start.second
        )

    def next_match(
        self, year: int, month: int, day: int, hour: int, minute: int, second: int
    ) -> WallTime | None:
        """First wall time >= the given fields that matches every field of the expression.

        The fields may overflow by one (second=60, minute=60, hour=24, day=32, month=13):
        the lookup tables carry that into the next unit, so "one second after" needs no
        datetime arithmetic.
        """
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        first_hour, first_minute, first_second = (
            self._first_hour,
            self._first_minute,
            self._first_second,
        )
        while year <= MAX_YEAR:
            allowed_month = months[month]
            if allowed_month < 0:
                year += 1
                month, day = self._first_month, 1
                hour, minute, second = first_hour, first_minute, first_second
                continue
            if allowed_month != month:
                month, day = allowed_month, 1
                hour, minute, second = first_hour, first_minute, first_second
            days = self._day_table(year, month)
            while True:
                allowed_day = days[day]
                if allowed_day < 0:
                    break
                if allowed_day != day:
                    day = allowed_day
                    hour, minute, second = first_hour, first_minute, first_second
                allowed_hour = hours[hour]
                if allowed_hour < 0:
                    day += 1
                    hour, minute, second = first_hour, first_minute, first_second
                    continue
                if allowed_hour != hour:
                    hour = allowed_hour
                    minute, second = first_minute, first_second
                allowed_minute = minutes[minute]
                if allowed_minute < 0:
                    hour += 1
                    minute, second = first_minute, first_second
                    continue
                if allowed_minute != minute:
                    minute = allowed_minute
                    second = first_second
                allowed_second = seconds[second]
                if allowed_second < 0:
                    minute += 1
                    second = first_second
                    continue
                return year, month, day, hour, minute, allowed_second
            month += 1
            day = 1
            hour, minute, second = first_hour, first_minute, first_second
        return None

    def matches(self, wall: datetime) -> bool:
        """Whether the naive wall time matches every field (used by tests and callers)."""
        return self.next_match_from(wall) == (
            wall.year,
            wall.month,
            wall.day,
            wall.hour,
            wall.minute,
            wall.second,
        )


@lru_cache(maxsize=65536)
def compile_cron(expression: str) -> CompiledCron:
    """Parse + compile once per distinct expression text (raises ScheduleError)."""
    return CompiledCron(parse_cron(expression))
