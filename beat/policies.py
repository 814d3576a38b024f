"""Which of the fires a task owes get recorded: the catch-up policy (pure logic).

A fire is *late but on time* while it is younger than the late grace (a failover, a slow
tick: the leader that just took over owes it, whatever the policy). Older fires were
*missed* while no scheduler ran; the task's catch-up policy decides what to do with the
ones inside the catch-up window, and everything older than the window is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from scheduler_app.choices import Catchup


def catchup_select(
    owed: Sequence[datetime],
    *,
    policy: str,
    now: datetime,
    late_grace: timedelta,
    window: timedelta,
) -> list[datetime]:
    """The fire instants to record out of `owed` (ascending; any after `now` are fires
    rung ahead of their time, on time by definition)."""
    on_time = [moment for moment in owed if moment >= now - late_grace]
    missed = [moment for moment in owed if now - window <= moment < now - late_grace]
    if policy == Catchup.ALL:
        return [*missed, *on_time]
    if policy == Catchup.LATEST and missed and not on_time:
        # One run stands for all the missed ones; when a fire is on time, that one does.
        return [missed[-1]]
    return on_time
