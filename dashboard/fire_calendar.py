"""A task's fires day by day: the past week's runs by outcome, and the next week's planned
fires from its schedule (the same preview the task page lists), in UTC days."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate

from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.task_schedule import fires_left, schedule_of_task
from schedules import ScheduleError
from schedules.preview import preview

DAYS_EACH_WAY = 7
MAX_PLANNED = 2000  # a minutely task plans 10080 fires a week: counted up to this, then "+"
FAILED = ("failed", "timed_out")


@dataclass
class CalendarDay:
    day: date
    succeeded: int = 0
    failed: int = 0
    other: int = 0
    planned: int = 0
    today: bool = False
    by_status: dict[str, int] = field(default_factory=dict)

    @property
    def runs_query(self) -> str:
        """The Runs page's window for this day (its `until` is exclusive: the next midnight)."""
        after = self.day + timedelta(days=1)
        return f"window=custom&since={self.day:%Y-%m-%d}T00:00&until={after:%Y-%m-%d}T00:00"


def fire_calendar(
    *, tenant: Tenant, task: TaskDefinition, now: datetime
) -> tuple[list[CalendarDay], bool]:
    """(days from a week ago to a week ahead, whether the planned count was capped)."""
    today = now.date()
    days = {
        today + timedelta(days=offset): CalendarDay(day=today + timedelta(days=offset))
        for offset in range(-DAYS_EACH_WAY, DAYS_EACH_WAY + 1)
    }
    days[today].today = True
    start = datetime.combine(today - timedelta(days=DAYS_EACH_WAY), datetime.min.time(), now.tzinfo)
    rows = (
        TaskExecution.objects.filter(tenant=tenant, task=task, scheduled_at__gte=start)
        .annotate(day=TruncDate("scheduled_at"))
        .values("day", "status")
        .annotate(total=Count("id"))
    )
    for row in rows:
        entry = days.get(row["day"])
        if entry is None:
            continue
        entry.by_status[row["status"]] = row["total"]
        if row["status"] == "success":
            entry.succeeded += row["total"]
        elif row["status"] in FAILED:
            entry.failed += row["total"]
        else:
            entry.other += row["total"]
    capped = False
    if task.is_schedulable:
        try:
            fires = preview(schedule_of_task(task), count=fires_left(task, MAX_PLANNED), now=now)
        except ScheduleError:
            fires = []
        # Capped: the calendar stops at MAX_PLANNED while the schedule goes on past it.
        capped = len(fires) == MAX_PLANNED and fires_left(task, MAX_PLANNED + 1) > MAX_PLANNED
        horizon = today + timedelta(days=DAYS_EACH_WAY)
        for fire in fires:
            day = fire.utc.date()
            if day > horizon:
                break
            days[day].planned += 1
    return list(days.values()), capped
