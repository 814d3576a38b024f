"""What the due heap entries owe: the fires each records and where its schedule goes next.

The leader pops due entries off its heap (`beat.heap`) and expands them here; the engine
records the batch (`services.firing.fires_record`, `dags.services.schedule_fires`) and saves
where each schedule goes next in the same commit. Plain logic over the heap: no database.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from beat.heap import Entry, ScheduleHeap
from beat.policies import catchup_select
from beat.sources import TASK
from scheduler_app.services.firing import Fire

# Bound on catch-up fires per task per tick (an every-second cron after a long outage).
MAX_CATCHUP_FIRES_PER_TASK = 1000

# (task or DAG id, next fire, last fired)
Update = tuple[uuid.UUID, datetime | None, datetime]


@dataclass
class Batch:
    """One batch of due entries expanded: task fires and DAG fires, and where each
    schedule goes next."""

    fires: list[Fire] = field(default_factory=list)
    updates: list[Update] = field(default_factory=list)
    dag_fires: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)
    dag_updates: list[Update] = field(default_factory=list)


def due_expand(
    due: list[Entry],
    *,
    heap: ScheduleHeap,
    now: datetime,
    window: timedelta,
    late_grace: timedelta,
    extra: timedelta = timedelta(0),
) -> Batch:
    """The fires each due entry owes up to now (or up to its ring-ahead, plus `extra`,
    past now), and where its schedule goes next (each entry is rescheduled on `heap`).

    Nothing older than the catch-up `window` is owed; inside it the task's (or DAG's)
    catch-up policy chooses (`policies.catchup_select`). The unique constraint turns a
    fire another leader already recorded into a no-op.
    """
    batch = Batch()
    for entry in due:
        horizon = now + entry.ring_ahead(heap.ahead)
        if entry.rings_ahead:
            horizon += extra
        fire_at: datetime | None = entry.next_fire_at
        if fire_at < now - window:
            fire_at = entry.schedule.next_after(now - window - timedelta(microseconds=1))
        owed: list[datetime] = []
        while fire_at is not None and fire_at <= horizon and len(owed) < MAX_CATCHUP_FIRES_PER_TASK:
            owed.append(fire_at)
            fire_at = entry.schedule.next_after(fire_at)
        if fire_at is not None and fire_at <= horizon:
            fire_at = entry.schedule.next_after(horizon)
        chosen = catchup_select(
            owed, policy=entry.catchup, now=now, late_grace=late_grace, window=window
        )
        last_fired = owed[-1] if owed else entry.next_fire_at
        entry.last_fired_at = last_fired
        heap.reschedule(entry, fire_at)
        if entry.kind != TASK:
            batch.dag_fires.extend((entry.task_id, moment) for moment in chosen)
            batch.dag_updates.append((entry.task_id, fire_at, last_fired))
            continue
        batch.fires.extend(
            Fire(
                task_id=entry.task_id,
                tenant_id=entry.tenant_id,
                scheduled_at=moment,
                priority=entry.priority,
                queue=entry.queue,
                max_attempts=entry.max_attempts,
                overlap=entry.overlap,
            )
            for moment in chosen
        )
        batch.updates.append((entry.task_id, fire_at, last_fired))
    return batch
