"""Enumerating fires: the next N (`preview`), those inside a window (`fires_between`), and
the next N with the fires calendar exclusions skip among them (`timeline`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from schedules.base import FireTime, Schedule, as_utc
from schedules.exclusions import ExcludingSchedule


def preview(schedule: Schedule, *, count: int, now: datetime) -> list[FireTime]:
    """The next `count` fires strictly after `now`, in UTC and on the schedule's wall clock."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    zone = schedule.timezone
    fires: list[FireTime] = []
    moment: datetime | None = as_utc(now, name="now")
    while len(fires) < count:
        moment = schedule.next_after(moment)
        if moment is None:
            break
        fires.append(FireTime(utc=moment, local=moment.astimezone(zone)))
    return fires


def fires_between(
    schedule: Schedule, *, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """Fires in the half-open window (start, end], oldest first, at most `limit` of them."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    end = as_utc(end, name="end")
    fires: list[datetime] = []
    moment: datetime | None = as_utc(start, name="start")
    while len(fires) < limit:
        moment = schedule.next_after(moment)
        if moment is None or moment > end:
            break
        fires.append(moment)
    return fires


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """A fire of the schedule's own rule: it fires, or it is skipped (`reason` says why)."""

    fire: FireTime
    skipped: bool
    reason: str = ""


def timeline(
    schedule: Schedule, *, count: int, now: datetime, max_skipped: int = 100
) -> list[TimelineEntry]:
    """The next `count` fires strictly after `now`, with the fires calendar exclusions skip
    among them (each with its reason; at most `max_skipped` of those are listed)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    zone = schedule.timezone
    if not isinstance(schedule, ExcludingSchedule):
        return [
            TimelineEntry(fire, skipped=False) for fire in preview(schedule, count=count, now=now)
        ]
    entries: list[TimelineEntry] = []
    fired = skipped = 0
    start = as_utc(now, name="now")
    for instant, reason in schedule.candidates_after(start, step_over_days=False):
        if fired >= count or skipped >= max_skipped:
            break
        fire = FireTime(utc=instant, local=instant.astimezone(zone))
        if reason is None:
            fired += 1
            entries.append(TimelineEntry(fire, skipped=False))
        else:
            skipped += 1
            entries.append(TimelineEntry(fire, skipped=True, reason=reason))
    else:
        return entries
    # Enough skipped fires listed: the rest are found a whole excluded day at a time.
    moment: datetime | None = entries[-1].fire.utc if entries else start
    while fired < count:
        moment = schedule.next_after(moment)
        if moment is None:
            break
        fired += 1
        entries.append(TimelineEntry(FireTime(utc=moment, local=moment.astimezone(zone)), False))
    return entries
