"""Calendar exclusions (`schedule.exclude`): fire times a schedule skips, and why.

A rule is one of, each with an optional `reason`:

    {"date": "2026-12-25"}                          one day
    {"from": "2026-12-24", "to": "2027-01-01"}      days, both ends included
    {"cron": "* * * * 6,0"}                         any fire time the cron matches
    {"calendar": "holidays:DE-BY"}                  the public holidays of a country[-region]

Dates and cron fields are read on the schedule's wall clock: a fire is excluded by the
local date it happens on (00:30 in Berlin on 29 March is 23:30 UTC on the 28th, and is
excluded by the 29th), so both DST transitions keep their local days. `ExcludingSchedule`
wraps a schedule so that `next_after` steps over excluded fires: the beat, the missed
ledger, backfills and catch-up all ask it and so none of them sees an excluded time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from schedules.base import Schedule
from schedules.cron_engine import CompiledCron, compile_cron
from schedules.errors import ScheduleError
from schedules.holiday_calendars import calendar_parse, holiday_name
from schedules.timezones import resolve_wall_time

MAX_RULES = 100
MAX_REASON_LENGTH = 200
# Fires skipped in a row before a schedule is taken to never fire again (an exclusion that
# matches every fire); day-based rules jump a whole excluded day or range in one step.
MAX_SKIPPED_IN_A_ROW = 100_000
KINDS = ("date", "from", "cron", "calendar")
KEYS = {"date": {"date"}, "from": {"from", "to"}, "cron": {"cron"}, "calendar": {"calendar"}}


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule: `first`..`last` local days (date, range), a cron, or a calendar."""

    kind: str
    reason: str
    first: date | None = None
    last: date | None = None
    cron: CompiledCron | None = None
    cron_has_seconds: bool = False
    country: str = ""
    subdivision: str | None = None

    def why(self, local: datetime) -> tuple[str, date | None] | None:
        """(reason, last excluded day, or None for a cron) when `local` is excluded."""
        day = local.date()
        if self.kind in ("date", "from"):
            if self.first <= day <= self.last:
                return self.reason, self.last
            return None
        if self.kind == "cron":
            wall = local.replace(tzinfo=None, microsecond=0)
            if not self.cron_has_seconds:
                wall = wall.replace(second=0)
            return (self.reason, None) if self.cron.matches(wall) else None
        name = holiday_name(self.country, self.subdivision, day)
        if name is None:
            return None
        return (f"{self.reason}: {name}" if self.reason else name), day


@dataclass(frozen=True, slots=True)
class Exclusions:
    rules: tuple[Rule, ...]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def why(self, local: datetime) -> tuple[str, date | None] | None:
        for rule in self.rules:
            found = rule.why(local)
            if found is not None:
                return found
        return None


NO_EXCLUSIONS = Exclusions(())


def exclusions_parse(value: Any, *, field: str = "schedule.exclude") -> list[dict[str, str]]:
    """The canonical stored form of `value` (a list of rules); ScheduleError naming the
    field (`schedule.exclude[2].to`) of the first mistake."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScheduleError("a list of exclusion rules", field=field)
    if len(value) > MAX_RULES:
        raise ScheduleError(f"at most {MAX_RULES} exclusion rules", field=field)
    return [_rule_clean(item, field=f"{field}[{index}]") for index, item in enumerate(value)]


def _rule_clean(item: Any, *, field: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise ScheduleError(
            "an exclusion rule is an object with date, from/to, cron or calendar", field=field
        )
    kinds = [kind for kind in KINDS if kind in item or (kind == "from" and "to" in item)]
    if len(kinds) != 1:
        raise ScheduleError(
            "give exactly one of date, from/to, cron or calendar"
            + (f" (got {', '.join(kinds)})" if kinds else ""),
            field=field,
        )
    kind = kinds[0]
    unknown = sorted(set(item) - KEYS[kind] - {"reason"})
    if unknown:
        raise ScheduleError(
            f"unknown key {unknown[0]!r} in a {kind} rule", field=f"{field}.{unknown[0]}"
        )
    clean: dict[str, str] = {}
    if kind == "date":
        clean["date"] = _day(item["date"], field=f"{field}.date").isoformat()
    elif kind == "from":
        for key in ("from", "to"):
            if key not in item:
                raise ScheduleError("a range needs both from and to", field=f"{field}.{key}")
        first = _day(item["from"], field=f"{field}.from")
        last = _day(item["to"], field=f"{field}.to")
        if first > last:
            raise ScheduleError("to must be on or after from", field=f"{field}.to")
        clean.update({"from": first.isoformat(), "to": last.isoformat()})
    elif kind == "cron":
        text = item["cron"]
        if not isinstance(text, str) or not text.strip() or len(text) > 255:
            raise ScheduleError("a cron expression (text)", field=f"{field}.cron")
        try:
            compile_cron(text.strip())
        except ScheduleError as error:
            raise ScheduleError(error.message, field=f"{field}.cron") from None
        clean["cron"] = text.strip()
    else:
        country, subdivision = calendar_parse(item["calendar"], field=f"{field}.calendar")
        clean["calendar"] = f"holidays:{country}" + (f"-{subdivision}" if subdivision else "")
    reason = item.get("reason")
    if reason is not None:
        if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
            raise ScheduleError(
                f"reason is text of at most {MAX_REASON_LENGTH} characters",
                field=f"{field}.reason",
            )
        if reason.strip():
            clean["reason"] = reason.strip()
    return clean


def _day(value: Any, *, field: str) -> date:
    try:
        if isinstance(value, str) and len(value) == 10:
            return date.fromisoformat(value)
    except ValueError:
        pass
    raise ScheduleError("a date as YYYY-MM-DD", field=field)


def exclusions_compile(stored: list[dict[str, str]] | tuple | None) -> Exclusions:
    """The rules of a stored (canonical) list; compiled once per distinct list."""
    if not stored:
        return NO_EXCLUSIONS
    return _compiled(json.dumps(list(stored), sort_keys=True))


@lru_cache(maxsize=4096)
def _compiled(text: str) -> Exclusions:
    return Exclusions(tuple(_rule_of(item) for item in exclusions_parse(json.loads(text))))


def _rule_of(item: dict[str, str]) -> Rule:
    given = item.get("reason", "")
    if "date" in item:
        day = date.fromisoformat(item["date"])
        return Rule("date", given or f"excluded date {item['date']}", first=day, last=day)
    if "from" in item:
        return Rule(
            "from",
            given or f"excluded {item['from']} to {item['to']}",
            first=date.fromisoformat(item["from"]),
            last=date.fromisoformat(item["to"]),
        )
    if "cron" in item:
        return Rule(
            "cron",
            given or f"excluded by cron {item['cron']}",
            cron=compile_cron(item["cron"]),
            cron_has_seconds=len(item["cron"].split()) == 6,
        )
    country, subdivision = calendar_parse(item["calendar"], field="schedule.exclude")
    return Rule("calendar", given, country=country, subdivision=subdivision)


@dataclass(frozen=True, slots=True)
class ExcludingSchedule:
    """`inner` without the fires `exclusions` exclude (read on `inner`'s wall clock)."""

    inner: Schedule
    exclusions: Exclusions

    @property
    def timezone(self) -> ZoneInfo:
        return self.inner.timezone

    def skip_reason(self, fire: datetime) -> str | None:
        """Why the fire at `fire` (an instant of `inner`) is skipped, or None."""
        found = self.exclusions.why(fire.astimezone(self.timezone))
        return found[0] if found else None

    def next_after(self, moment: datetime) -> datetime | None:
        for fire, reason in self.candidates_after(moment):
            if reason is None:
                return fire
        return None

    def candidates_after(
        self, moment: datetime, *, step_over_days: bool = True
    ) -> Iterator[tuple[datetime, str | None]]:
        """`inner`'s fires after `moment`, each with why it is skipped (None: it fires).
        With `step_over_days` a whole excluded day or range is stepped over at once (its
        first fire stands for it). Ends when `inner` ends or after MAX_SKIPPED_IN_A_ROW
        skips in a row."""
        zone = self.timezone
        skipped = 0
        fire = self.inner.next_after(moment)
        while fire is not None:
            found = self.exclusions.why(fire.astimezone(zone))
            if found is None:
                skipped = 0
                yield fire, None
                fire = self.inner.next_after(fire)
                continue
            skipped += 1
            if skipped > MAX_SKIPPED_IN_A_ROW:
                return
            yield fire, found[0]
            last_day = found[1] if step_over_days else None
            after = fire
            if last_day == date.max:
                return
            if last_day is not None:
                midnight = datetime.combine(last_day + timedelta(days=1), time())
                after = max(fire, resolve_wall_time(zone, midnight) - timedelta(microseconds=1))
            fire = self.inner.next_after(after)


def with_exclusions(schedule: Schedule, stored: list[dict[str, str]] | None) -> Schedule:
    """`schedule` wrapped when `stored` has rules, else `schedule` itself."""
    exclusions = exclusions_compile(stored)
    return ExcludingSchedule(schedule, exclusions) if exclusions else schedule


def exclusions_leave_no_fire(
    schedule: Schedule, stored: list[dict[str, str]] | None, *, after: datetime
) -> bool:
    """True when `schedule` fires after `after` but none of those fires survives the
    exclusions (within MAX_SKIPPED_IN_A_ROW): a definition that would never run."""
    if not stored or schedule.next_after(after) is None:
        return False
    return with_exclusions(schedule, stored).next_after(after) is None
