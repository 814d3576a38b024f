"""Manual schedules never fire by themselves (they are triggered on demand)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from schedules.base import as_utc


@dataclass(frozen=True, slots=True)
class ManualSchedule:
    timezone: ZoneInfo

    schedule_type = "manual"

    def next_after(self, moment: datetime) -> datetime | None:
        as_utc(moment)  # same contract as the other schedules: aware datetimes only
        return None
