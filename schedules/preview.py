"""Enumerating fires: the next N (`preview`) or those inside a window (`fires_between`)."""

from __future__ import annotations

from datetime import datetime

from schedules.base import FireTime, Schedule, as_utc


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
