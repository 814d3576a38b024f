"""An in-memory min-heap of (ring time, task) with lazy deletion.

Only due entries are touched on a tick: O(log N) per fire, never a scan of all N.
A changed or removed task bumps its version; stale heap items are skipped when popped.

An entry rings `ahead` before its next fire when nothing at fire time decides the fire's
fate (a task with overlap `allow`): the beat records it early and the worker that claims it
starts the handler at the fire's time (see the engine's `_fire_due`). Other entries ring at
their fire: another overlap policy looks at the other runs then, and a DAG's fire decides
at once whether its run starts (max_active_runs) and starts its first nodes.

A burst may take longer to ring than `ahead` leaves: the engine then rings the entries that
ring ahead earlier still (`pop_due`'s `extra`, sized by `due_ahead_profile`, see the
engine's `_lead`). Entries ringing at their fire are never taken early.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from scheduler_app.choices import Overlap
from schedules import Schedule


# slots: a million entries is the design's size; each saved attribute dict is ~100 bytes.
@dataclass(slots=True)
class Entry:
    task_id: uuid.UUID
    tenant_id: uuid.UUID
    priority: int
    queue: str
    max_attempts: int
    schedule: Schedule
    next_fire_at: datetime
    catchup: str = "latest"
    overlap: str = Overlap.ALLOW
    version: int = 0
    last_fired_at: datetime | None = None
    # "task" or "dag" (`beat.sources`): what a fire of this entry records.
    kind: str = "task"

    @property
    def rings_ahead(self) -> bool:
        """Whether this entry may ring before its fire: an overlap policy other than `allow`
        looks at the task's other runs, which must be judged at the fire's time; a DAG's
        fire judges its other runs too (max_active_runs) and starts nodes at once."""
        return self.overlap == Overlap.ALLOW and self.kind == "task"

    def ring_ahead(self, ahead: timedelta) -> timedelta:
        """How long before its fire this entry rings (`ahead`, or nothing)."""
        return ahead if self.rings_ahead else _NO_LEAD


_NO_LEAD = timedelta(0)
# The resolution of `ScheduleHeap.due_ahead_profile`.
BUCKET_SECONDS = 0.1


# A heap item is a plain tuple (ring_at, sequence, task_id, version): tuples compare in C,
# and the unique sequence decides ties before the task id is ever compared. An ordered
# dataclass costs a Python-level __lt__ per comparison (20 of them per push at 1M entries).
_RING_AT, _TASK_ID, _VERSION = 0, 2, 3


class ScheduleHeap:
    def __init__(self, *, ahead: timedelta = _NO_LEAD) -> None:
        self.ahead = ahead
        self._items: list[tuple[datetime, int, uuid.UUID, int]] = []
        self._entries: dict[uuid.UUID, Entry] = {}
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, task_id: uuid.UUID) -> bool:
        return task_id in self._entries

    def get(self, task_id: uuid.UUID) -> Entry | None:
        return self._entries.get(task_id)

    def upsert(self, entry: Entry) -> None:
        previous = self._entries.get(entry.task_id)
        entry.version = previous.version + 1 if previous else 0
        self._entries[entry.task_id] = entry
        self._push(entry)

    def remove(self, task_id: uuid.UUID) -> None:
        self._entries.pop(task_id, None)

    def reschedule(self, entry: Entry, next_fire_at: datetime | None) -> None:
        """Move a popped entry to its next fire (or drop it when it never fires again)."""
        if next_fire_at is None:
            self._entries.pop(entry.task_id, None)
            return
        entry.next_fire_at = next_fire_at
        entry.version += 1
        self._push(entry)

    def peek_time(self) -> datetime | None:
        """When the next entry rings."""
        self._drop_stale_head()
        return self._items[0][_RING_AT] if self._items else None

    def pop_due(self, now: datetime, limit: int, extra: timedelta = _NO_LEAD) -> list[Entry]:
        """Entries that ring by `now` (their fire may be up to `ahead` later), and those
        that ring ahead by `now + extra` (up to `ahead + extra` before their fire)."""
        due: list[Entry] = []
        held: list[tuple[datetime, int, uuid.UUID, int]] = []  # at-fire entries not due yet
        until = now + extra
        while self._items and len(due) < limit:
            self._drop_stale_head()
            if not self._items or self._items[0][_RING_AT] > until:
                break
            item = heapq.heappop(self._items)
            entry = self._entries[item[_TASK_ID]]
            if item[_RING_AT] > now and not entry.rings_ahead:
                held.append(item)
                continue
            due.append(entry)
        for item in held:
            heapq.heappush(self._items, item)
        return due

    def skip_through(self, horizon: datetime, batch_size: int) -> None:
        """Move every entry that rings by `horizon` past it without firing (a standby behind
        its leader). An entry that rings ahead moves to its first fire past the horizon plus
        its lead (it rings after the horizon): a leader alive at the horizon had rung that far."""
        while due := self.pop_due(horizon, batch_size):
            for entry in due:
                lead = entry.ring_ahead(self.ahead)
                self.reschedule(entry, entry.schedule.next_after(horizon + lead))

    def due_ahead_profile(self, until: datetime, *, cap: int) -> list[tuple[datetime, int]]:
        """(ring time, how many) of the live entries that ring ahead and ring by `until`,
        in ring order, in buckets of BUCKET; at most about `cap` entries are counted. Walks
        only the heap's items that ring by `until` (a min-heap's children ring no earlier
        than their parent): O(what is counted), not O(N)."""
        counts: dict[int, int] = {}
        counted, stack = 0, [0]
        items, entries = self._items, self._entries
        while stack and counted < cap:
            index = stack.pop()
            if index >= len(items) or items[index][_RING_AT] > until:
                continue
            ring_at, _, task_id, version = items[index]
            entry = entries.get(task_id)
            if entry is not None and entry.version == version and entry.rings_ahead:
                bucket = int(ring_at.timestamp() / BUCKET_SECONDS)
                counts[bucket] = counts.get(bucket, 0) + 1
                counted += 1
            stack.extend((2 * index + 1, 2 * index + 2))
        return [
            (datetime.fromtimestamp(bucket * BUCKET_SECONDS, UTC), counts[bucket])
            for bucket in sorted(counts)
        ]

    def _push(self, entry: Entry) -> None:
        self._sequence += 1
        ring_at = entry.next_fire_at - entry.ring_ahead(self.ahead)
        heapq.heappush(self._items, (ring_at, self._sequence, entry.task_id, entry.version))

    def _drop_stale_head(self) -> None:
        while self._items:
            head = self._items[0]
            entry = self._entries.get(head[_TASK_ID])
            if entry is not None and entry.version == head[_VERSION]:
                return
            heapq.heappop(self._items)
