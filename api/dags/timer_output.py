"""A run's sleep and sensor nodes as the run detail shows them (`timers`)."""

from __future__ import annotations

from datetime import datetime

from dags.models import DagTimer
from dags.timer_selectors import timer_time_left


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def timers_output(timers: list[DagTimer], *, now: datetime) -> list[dict]:
    """`due_at` is a sleep's wake-up or a sensor's next poke; `seconds_left` the time until
    it, `deadline_seconds_left` a sensor's until its timeout (null once the row ended)."""
    rows = []
    for timer in timers:
        left = timer_time_left(timer, now=now)
        rows.append(
            {
                "node_id": timer.node_id,
                "kind": timer.kind,
                "status": timer.status,
                "started_at": _iso(timer.started_at),
                "due_at": _iso(timer.due_at),
                "deadline": _iso(timer.deadline),
                "seconds_left": left.due_in,
                "deadline_seconds_left": left.deadline_in,
                "interval_seconds": timer.interval_seconds or None,
                "attempts": timer.attempts,
                "last_poked_at": _iso(timer.last_poked_at),
                "last_error": timer.last_error,
                "resolved_at": _iso(timer.resolved_at),
            }
        )
    return rows
