"""Missed schedules: fires a task's schedule expected in a window for which no execution
started on time. Failures in schedulers are silent; this makes the silence visible.

Computed from the schedule (schedules) and the executions table, per task.
A fire counts as missed when no attempt-1 execution exists for its time, or when the one
that exists started more than `grace_seconds` late (or has not started yet and is late).
Fires before the task existed are not expected. A task paused now is not listed; a task that
was paused for part of the window and resumed will show the paused fires (the pause
history is not recorded), which the page says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from scheduler_app.choices import ExecutionStatus, ScheduleType
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.task_schedule import schedule_of_task
from schedules import ScheduleError
from schedules.preview import fires_between

MAX_FIRES_PER_TASK = 500


@dataclass
class MissedFire:
    scheduled_at: datetime
    reason: str  # "no execution" | "started late" | "not started"
    lag_seconds: float | None = None


@dataclass
class TaskMisses:
    task: TaskDefinition
    expected: int
    missed: list[MissedFire] = field(default_factory=list)


def missed_fires(
    *,
    tenant: Tenant,
    window: timedelta,
    grace_seconds: float,
    now: datetime | None = None,
    task: TaskDefinition | None = None,
) -> list[TaskMisses]:
    now = now or timezone.now()
    tasks = TaskDefinition.objects.filter(
        tenant=tenant, deleted_at__isnull=True, enabled=True, paused=False
    ).exclude(schedule_type=ScheduleType.MANUAL)
    if task is not None:
        tasks = tasks.filter(id=task.id)
    result = []
    # Fires newer than the grace period may still start on time: not judged yet.
    end = now - timedelta(seconds=grace_seconds)
    for definition in tasks.order_by("name"):
        start = max(now - window, definition.created_at)
        if start >= end:
            continue
        try:
            expected = fires_between(
                schedule_of_task(definition), start=start, end=end, limit=MAX_FIRES_PER_TASK
            )
        except ScheduleError:
            continue
        if not expected:
            continue
        started = dict(
            TaskExecution.objects.filter(
                tenant=tenant,
                task=definition,
                attempt=1,
                scheduled_at__gte=expected[0],
                scheduled_at__lte=expected[-1],
            )
            .exclude(status__in=[ExecutionStatus.CANCELLED])
            .values_list("scheduled_at", "started_at")
        )
        misses = TaskMisses(task=definition, expected=len(expected))
        for fire in expected:
            if fire not in started:
                misses.missed.append(MissedFire(fire, "no execution"))
                continue
            started_at = started[fire]
            if started_at is None:
                misses.missed.append(MissedFire(fire, "not started"))
                continue
            lag = (started_at - fire).total_seconds()
            if lag > grace_seconds:
                misses.missed.append(MissedFire(fire, "started late", lag))
        if misses.missed:
            result.append(misses)
    return result
