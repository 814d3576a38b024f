"""Reads of a run's sleep and sensor rows (`DagTimer`), and the time left on each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dags.choices import TimerKind, TimerStatus
from dags.models import DagRun, DagTimer


@dataclass(frozen=True)
class TimeLeft:
    """Seconds from now: a sleep's wake-up; a sensor's next poke and its deadline. None once
    the row ended."""

    due_in: float | None
    deadline_in: float | None


def timers_of_run(*, run: DagRun) -> list[DagTimer]:
    """The run is already the tenant's (the caller got it from a tenant-scoped selector)."""
    return list(
        DagTimer.objects.filter(tenant_id=run.tenant_id, run=run).order_by("started_at", "node_id")
    )


def timer_time_left(timer: DagTimer, *, now: datetime) -> TimeLeft:
    if timer.status != TimerStatus.WAITING:
        return TimeLeft(due_in=None, deadline_in=None)
    due_in = max(0.0, (timer.due_at - now).total_seconds())
    deadline_in = (
        max(0.0, (timer.deadline - now).total_seconds())
        if timer.kind == TimerKind.SENSOR and timer.deadline is not None
        else None
    )
    return TimeLeft(due_in=due_in, deadline_in=deadline_in)
