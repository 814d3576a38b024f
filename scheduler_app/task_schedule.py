"""The bridge between a task definition's stored fields and a `Schedule` object."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from scheduler_app.choices import ScheduleType
from schedules import Schedule, parse_schedule
from schedules.exclusions import with_exclusions
from schedules.shaping import JitteredSchedule, WindowedSchedule


def schedule_for(
    *,
    schedule_type: str,
    expression: str,
    timezone: str,
    run_at: datetime | None,
    anchor: datetime | None,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    jitter_seconds: int = 0,
    seed: object = "",
    exclude: list[dict[str, str]] | None = None,
) -> Schedule:
    """The schedule object; `seed` (the task id) is only read for jitter; `exclude` (the
    stored calendar exclusions) wraps it last, so an excluded fire is judged at the instant
    it would ring (jitter included)."""
    if schedule_type == ScheduleType.CRON:
        anchor = run_at = None  # a cron schedule depends on its text and zone only
    elif anchor is not None:
        # Interval fires land on whole seconds counted from the task's creation.
        anchor = anchor.replace(microsecond=0)
    schedule = _parsed(schedule_type, expression, timezone, run_at, anchor)
    if start_at is not None or end_at is not None:
        schedule = WindowedSchedule(schedule, start_at, end_at)
    if jitter_seconds:
        schedule = JitteredSchedule(schedule, int(jitter_seconds), str(seed))
    return with_exclusions(schedule, exclude)


@lru_cache(maxsize=65536)
def _parsed(
    schedule_type: str,
    expression: str,
    timezone: str,
    run_at: datetime | None,
    anchor: datetime | None,
) -> Schedule:
    """Schedules are immutable: a million tasks on a few hundred distinct crons share them."""
    return parse_schedule(
        schedule_type=schedule_type,
        expression=expression,
        timezone=timezone,
        run_at=run_at,
        anchor=anchor,
    )


def schedule_of(definition) -> Schedule:
    """The schedule of a task or a DAG: both store the same schedule and policy fields, and
    the beat fires both from one heap, so one function reads them."""
    return schedule_for(
        schedule_type=definition.schedule_type,
        expression=definition.schedule_expression,
        timezone=definition.timezone,
        run_at=definition.run_at,
        anchor=definition.created_at,
        start_at=definition.start_at,
        end_at=definition.end_at,
        jitter_seconds=definition.jitter_seconds,
        seed=str(definition.id),
        exclude=definition.schedule_exclude,
    )


schedule_of_task = schedule_of


def fires_left(definition, count: int) -> int:
    """How many of the next `count` fires a task or DAG will have: a schedule with
    `policy.remaining_runs` pauses itself after its last allowed one."""
    remaining = definition.remaining_runs
    return count if remaining is None else min(count, remaining)


def first_fire_after(task, moment: datetime) -> datetime | None:
    """Next fire strictly after `moment`, or None when the task does not fire by itself."""
    if not task.is_schedulable or task.schedule_type == ScheduleType.MANUAL:
        return None
    return schedule_of_task(task).next_after(moment)
