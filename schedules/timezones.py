"""IANA zone loading and the wall-clock <-> UTC arithmetic around DST transitions.

Conventions (PEP 495): for a naive wall time `t` in zone `z`, `z.utcoffset(t)` uses fold=0.
  * normal time:       offset(fold=0) == offset(fold=1)
  * repeated (fall back, ambiguous): offset(fold=0) > offset(fold=1); fold=0 is the first pass
  * skipped (spring forward, in a gap): offset(fold=0) < offset(fold=1)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from schedules.errors import ScheduleError

TIMEZONE_FIELD = "schedule.timezone"

# Zone keys that never have a transition: evaluation can skip all DST handling for them.
UTC_KEYS = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Etc/Zulu",
        "Zulu",
        "GMT",
        "Etc/GMT",
        "GMT0",
        "Etc/GMT0",
        "GMT+0",
        "Etc/GMT+0",
        "GMT-0",
        "Etc/GMT-0",
        "Greenwich",
        "Etc/Greenwich",
    }
)


def load_timezone(name: str) -> ZoneInfo:
    """Return the IANA zone called `name` or raise ScheduleError(field="schedule.timezone")."""
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError(
            "timezone is required (an IANA name such as 'UTC')", field=TIMEZONE_FIELD
        )
    if name != name.strip():
        raise ScheduleError(f"unknown timezone {name!r}", field=TIMEZONE_FIELD)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'",
            field=TIMEZONE_FIELD,
        ) from None


def is_utc(zone: ZoneInfo) -> bool:
    return zone.key in UTC_KEYS


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """UTC offset of `zone` at the aware instant."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def transition_between(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first whole-second instant in (low, high] whose UTC offset differs from low's.

    `low` and `high` are aware UTC instants with different offsets in `zone` (and at most
    one transition between them: they are at most a DST shift apart). Bisection, about a
    dozen steps; only used right next to a transition.
    """
    low_offset = offset_at(zone, low)
    low_s, high_s = 0, int((high - low).total_seconds())
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        if offset_at(zone, low + timedelta(seconds=middle)) == low_offset:
            low_s = middle
        else:
            high_s = middle
    return low + timedelta(seconds=high_s)


def resolve_wall_time(zone: ZoneInfo, wall: datetime) -> datetime:
    """UTC instant of a naive wall time under the fixed-time DST rule.

    A repeated wall time resolves to its first occurrence; a skipped one to the first valid
    instant after the gap (the transition itself, e.g. 03:00 local on a 02:00->03:00 jump).
    """
    wall = wall.replace(tzinfo=None, fold=0)
    offset0 = zone.utcoffset(wall)
    offset1 = zone.utcoffset(wall.replace(fold=1))
    assert offset0 is not None and offset1 is not None
    base = wall.replace(tzinfo=UTC)
    if offset0 >= offset1:
        return base - offset0
    return transition_between(zone, base - offset1, base - offset0)
