"""`parse_schedule`: validate a schedule definition and build the matching `Schedule`."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from schedules.base import Schedule
from schedules.cron import CronSchedule
from schedules.errors import ScheduleError
from schedules.interval import EPOCH, IntervalSchedule, parse_interval
from schedules.manual import ManualSchedule
from schedules.once import OnceSchedule, parse_run_at
from schedules.timezones import load_timezone, resolve_wall_time

SCHEDULE_TYPES = ("cron", "interval", "once", "manual")
# The longest cron or interval text. Every way in (the API, DAG files and the DAG API, the
# dashboard's forms) passes here, so none can hand the parsers an expression of thousands
# of digits (Python's int() refuses more than 4,300: a 500, not a 400).
MAX_EXPRESSION_LENGTH = 255


def parse_schedule(
    *,
    schedule_type: str,
    expression: str = "",
    timezone: str = "UTC",
    run_at: datetime | str | None = None,
    anchor: datetime | None = None,
) -> Schedule:
    """Validate everything and return the schedule; raise ScheduleError naming the field.

    `expression` is the cron text or the interval text (ignored for once/manual); `run_at`
    is used by once schedules only; `anchor` (interval only, default the Unix epoch) is the
    first fire of an interval schedule. Naive `run_at`/`anchor` are wall time in `timezone`.
    """
    if schedule_type not in SCHEDULE_TYPES:
        raise ScheduleError(
            f"unknown schedule type {schedule_type!r}; expected one of {', '.join(SCHEDULE_TYPES)}",
            field="schedule.type",
        )
    if isinstance(expression, str) and len(expression) > MAX_EXPRESSION_LENGTH:
        raise ScheduleError(
            f"expression is longer than {MAX_EXPRESSION_LENGTH} characters",
            field="schedule.expression",
        )
    zone = load_timezone(timezone)
    if schedule_type == "cron":
        return CronSchedule(expression.strip() if isinstance(expression, str) else expression, zone)
    if schedule_type == "interval":
        period = parse_interval(expression)
        return IntervalSchedule(period, _interval_anchor(anchor, zone), zone, expression.strip())
    if schedule_type == "once":
        return OnceSchedule(parse_run_at(run_at, zone), zone)
    return ManualSchedule(zone)


def _interval_anchor(anchor: datetime | None, zone: ZoneInfo) -> datetime:
    if anchor is None:
        return EPOCH
    try:
        if anchor.tzinfo is None or anchor.utcoffset() is None:
            return resolve_wall_time(zone, anchor)
        return anchor.astimezone(UTC)
    except OverflowError:
        raise ScheduleError(f"anchor {anchor!r} is out of range", field="schedule.anchor") from None
