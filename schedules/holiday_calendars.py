"""Public-holiday calendars (`holidays:US`, `holidays:DE-BY`) from the `holidays` package.

A calendar name is `holidays:<country>[-<subdivision>]` with ISO 3166 codes as the package
knows them. The holidays of one calendar and year are computed once per process and kept
(a few dozen dates; the beat asks for the same year on every fire).
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache

import holidays

from schedules.errors import ScheduleError

PREFIX = "holidays:"


def calendar_parse(name: object, *, field: str) -> tuple[str, str | None]:
    """(country, subdivision or None) of a calendar name; ScheduleError naming `field`."""
    if not isinstance(name, str) or not name.startswith(PREFIX):
        raise ScheduleError(
            'a calendar is "holidays:<country>" or "holidays:<country>-<subdivision>" '
            '(e.g. "holidays:US", "holidays:DE-BY")',
            field=field,
        )
    code = name.removeprefix(PREFIX).strip()
    country, _, subdivision = code.partition("-")
    country = country.upper()
    supported = _supported()
    if country not in supported:
        raise ScheduleError(f"unknown holiday calendar country {country!r}", field=field)
    if not subdivision:
        return country, None
    subdivision = subdivision.upper()
    if subdivision not in supported[country]:
        known = ", ".join(supported[country][:12]) or "none"
        raise ScheduleError(
            f"unknown subdivision {subdivision!r} of {country} (known: {known}"
            f"{', ...' if len(supported[country]) > 12 else ''})",
            field=field,
        )
    return country, subdivision


def holiday_name(country: str, subdivision: str | None, day: date) -> str | None:
    """The name of the public holiday on `day` in that calendar, or None."""
    return _year(country, subdivision, day.year).get(day)


@lru_cache(maxsize=1)
def _supported() -> dict[str, list[str]]:
    return {code: list(subs) for code, subs in holidays.list_supported_countries().items()}


@lru_cache(maxsize=4096)
def _year(country: str, subdivision: str | None, year: int) -> dict[date, str]:
    calendar = holidays.country_holidays(country, subdiv=subdivision, years=year)
    return dict(calendar.items())
