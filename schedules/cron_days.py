"""Which days of a month match the day-of-month and day-of-week fields.

A month's matching days depend only on its length and the weekday of its 1st, so there are
at most 4 x 7 distinct answers per pair of day fields; `DayRule` memoises them as lookup
tables, shared by all expressions with the same day fields.
Weekdays are cron numbers: 0 = Sunday .. 6 = Saturday.
"""

from __future__ import annotations

from functools import lru_cache

from schedules.cron_syntax import DayOfMonthSpec, DayOfWeekSpec

SATURDAY = 6
SUNDAY = 0

# Lengths a month can have: February 28 or 29, the rest fixed.
MONTH_LENGTHS: dict[int, tuple[int, ...]] = {
    month: (28, 29) if month == 2 else (30,) if month in (4, 6, 9, 11) else (31,)
    for month in range(1, 13)
}


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def nearest_weekday(day: int, length: int, first_weekday: int) -> int:
    """Quartz `W`: the Monday-Friday closest to `day` without leaving the month."""
    weekday = (first_weekday + day - 1) % 7
    if weekday == SATURDAY:
        return day - 1 if day > 1 else day + 2
    if weekday == SUNDAY:
        return day + 1 if day < length else day - 2
    return day


def day_of_month_days(spec: DayOfMonthSpec, length: int, first_weekday: int) -> set[int]:
    days = {day for day in spec.days if day <= length}
    days.update(length - offset for offset in spec.last_minus if length - offset >= 1)
    days.update(
        nearest_weekday(day, length, first_weekday) for day in spec.nearest_weekday if day <= length
    )
    if spec.last_weekday:
        days.add(nearest_weekday(length, length, first_weekday))
    return days


def day_of_week_days(spec: DayOfWeekSpec, length: int, first_weekday: int) -> set[int]:
    days = {day for day in range(1, length + 1) if (first_weekday + day - 1) % 7 in spec.weekdays}
    for weekday, nth in spec.nth:
        day = 1 + (weekday - first_weekday) % 7 + 7 * (nth - 1)
        if day <= length:
            days.add(day)
    last_weekday = (first_weekday + length - 1) % 7
    days.update(length - (last_weekday - weekday) % 7 for weekday in spec.last)
    return days


def matching_days(
    dom: DayOfMonthSpec, dow: DayOfWeekSpec, length: int, first_weekday: int
) -> frozenset[int]:
    """Vixie semantics: if either field starts with `*` both must match, otherwise either.

    (`*` itself expands to every day, so `* * 5` is "every Friday" and `*/2 * 1` is
    "odd days that are Mondays", exactly as in Vixie cron.)
    """
    by_month = day_of_month_days(dom, length, first_weekday)
    by_week = day_of_week_days(dow, length, first_weekday)
    if dom.star or dow.star:
        return frozenset(by_month & by_week)
    return frozenset(by_month | by_week)


def next_value_table(values: tuple[int, ...] | frozenset[int], size: int) -> tuple[int, ...]:
    """`table[v]` = smallest member of `values` >= v, else -1, for v in range(size)."""
    table = [-1] * size
    following = -1
    for value in range(size - 1, -1, -1):
        if value in values:
            following = value
        table[value] = following
    return tuple(table)


class DayRule:
    """The day fields of an expression, with memoised per-month lookup tables.

    `tables[length * 8 + first_weekday]` is a `next_value_table` over days 0..32 (slot 32 is
    always -1). When the answer does not depend on weekdays, `first_weekday` is always 0.
    Shared by every expression with the same day fields (see `day_rule`).
    """

    __slots__ = ("day_of_month", "day_of_week", "tables", "uses_weekday")

    def __init__(self, day_of_month: DayOfMonthSpec, day_of_week: DayOfWeekSpec) -> None:
        self.day_of_month = day_of_month
        self.day_of_week = day_of_week
        # A month's days depend on the weekday of its 1st only through W/LW or a day-of-week
        # field that does not allow every weekday (nth/last only add to an all-days set).
        self.uses_weekday = bool(
            day_of_month.nearest_weekday
            or day_of_month.last_weekday
            or len(day_of_week.weekdays) != 7
        )
        self.tables: dict[int, tuple[int, ...]] = {}

    def table(self, length: int, first_weekday: int) -> tuple[int, ...]:
        if not self.uses_weekday:
            first_weekday = 0
        key = length * 8 + first_weekday
        table = self.tables.get(key)
        if table is None:
            days = matching_days(self.day_of_month, self.day_of_week, length, first_weekday)
            table = self.tables[key] = next_value_table(days, 33)
        return table

    def can_match(self, month: int) -> bool:
        """Whether some occurrence of `month` has a matching day (any year, any weekday)."""
        return any(
            self.table(length, first_weekday)[1] > 0
            for length in MONTH_LENGTHS[month]
            for first_weekday in range(7 if self.uses_weekday else 1)
        )


@lru_cache(maxsize=4096)
def day_rule(day_of_month: DayOfMonthSpec, day_of_week: DayOfWeekSpec) -> DayRule:
    return DayRule(day_of_month, day_of_week)
