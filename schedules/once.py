"""One-shot schedules: fire once at `run_at`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from schedules.base import as_utc
from schedules.errors import ScheduleError
from schedules.timezones import resolve_wall_time

RUN_AT_FIELD = "schedule.run_at"


def parse_run_at(run_at: datetime | str | None, zone: ZoneInfo) -> datetime:
    """ISO-8601 text or a datetime -> aware UTC. Naive values are wall time in `zone`.

    A naive wall time that DST makes ambiguous or skipped follows the cron fixed-time rule:
    first occurrence, or the first valid instant after the gap.
    """
    if run_at is None or (isinstance(run_at, str) and not run_at.strip()):
        raise ScheduleError("run_at is required for a once schedule", field=RUN_AT_FIELD)
    if isinstance(run_at, str):
        text = run_at.strip()
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ScheduleError(
                f"invalid ISO-8601 datetime {text!r} (e.g. 2030-01-31T09:00:00+01:00)",
                field=RUN_AT_FIELD,
            ) from None
    elif isinstance(run_at, datetime):
        value = run_at
    else:
        raise ScheduleError(
            f"run_at must be an ISO-8601 string or a datetime, got {type(run_at).__name__}",
            field=RUN_AT_FIELD,
        )
    try:
        if value.tzinfo is None or value.utcoffset() is None:
            return resolve_wall_time(zone, value)
        return value.astimezone(UTC)
    except OverflowError:
        raise ScheduleError(f"run_at {run_at!r} is out of range", field=RUN_AT_FIELD) from None


@dataclass(frozen=True, slots=True)
class OnceSchedule:
    run_at: datetime  # aware UTC
    timezone: ZoneInfo

    schedule_type = "once"

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_at", as_utc(self.run_at, name="run_at"))

    def next_after(self, moment: datetime) -> datetime | None:
        return self.run_at if self.run_at > as_utc(moment) else None
