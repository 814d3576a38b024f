"""`policy.remaining_runs: N`: a schedule pauses itself after N more recorded fires.

The beat records a batch of fires in one transaction (`firing.fires_record`); this module
does the count inside it:

1. `limited_remaining_lock`: the rows of the batch's tasks that have a limit, locked
   (FOR UPDATE, in id order). A partial index holds only the limited tasks, so a batch of
   tasks without a limit pays one probe of a near-empty index and nothing else.
2. `fires_within_remaining`: the fires of a limited task beyond its count are dropped; a
   fire some scheduler already recorded (UNIQUE(task, scheduled_at, attempt)) is not counted
   again, so two schedulers that both lead spend one count per fire, not two.
3. `remaining_runs_spend`: one UPDATE ... FROM unnest per batch takes the inserted runs off
   the count; a count that reaches 0 pauses the task in the same statement, with the record
   (paused_by "remaining_runs", a note) and no next fire.

A fire counts when it records a run (queued, or pending under buffer_one); one recorded as
skipped by the overlap policy ran nothing and does not. Catch-up fires count (each is a run);
manual triggers and retries never pass here.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from django.db import connection, models
from django.db.models import Case, F, Value, When

from scheduler_app.choices import ExecutionStatus
from scheduler_app.db_rows import server_bound_cursor
from scheduler_app.models import TaskDefinition, TaskExecution

PAUSED_BY = "remaining_runs"
_SKIPPED = ExecutionStatus.SKIPPED.value


class _Fire(Protocol):
    task_id: uuid.UUID
    scheduled_at: datetime


def exhausted_note(scheduled_at: datetime) -> str:
    """The pause note of a schedule whose count ran out (tasks and DAGs alike)."""
    at = scheduled_at.isoformat().replace("+00:00", "Z")
    return f"every run policy.remaining_runs allowed has fired (the last one scheduled for {at})"


def spent_limit_cleared() -> Case:
    """For a resume's UPDATE: a spent count (0) goes (no limit any more), any other stays."""
    return Case(
        When(remaining_runs=0, then=Value(None)),
        default=F("remaining_runs"),
        output_field=models.PositiveIntegerField(null=True),
    )


def limited_remaining_lock(task_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """remaining_runs of the limited tasks among these, their rows locked until commit."""
    ids = list(task_ids)  # duplicates are harmless to ANY(); the lock order is the SQL's
    if not ids:
        return {}
    table = TaskDefinition._meta.db_table
    # Bound on the server in binary: a batch's ids cost no quoting into the SQL text.
    with server_bound_cursor() as cursor:
        cursor.execute(
            f"SELECT id, remaining_runs FROM {table} "
            "WHERE remaining_runs IS NOT NULL AND id = ANY(%b::uuid[]) ORDER BY id FOR UPDATE",
            [ids],
        )
        return dict(cursor.fetchall())


def _already_recorded(fires: Sequence[_Fire]) -> set[tuple[uuid.UUID, datetime]]:
    if not fires:
        return set()
    recorded = TaskExecution.platform.filter(
        task_id__in={fire.task_id for fire in fires},
        scheduled_at__in={fire.scheduled_at for fire in fires},
        attempt=1,
    ).values_list("task_id", "scheduled_at")
    return set(recorded)


def fires_within_remaining(
    fires: Sequence[_Fire], statuses: Sequence[tuple[str, str]], remaining: dict[uuid.UUID, int]
) -> list[int]:
    """Indexes of the fires to record: all of an unlimited task's; a limited task's in order
    while runs are left (a skipped fire spends nothing but is dropped once nothing is left)."""
    limited = [fire for fire in fires if fire.task_id in remaining]
    recorded = _already_recorded(limited)
    left = dict(remaining)
    kept: list[int] = []
    for index, (fire, (status, _)) in enumerate(zip(fires, statuses, strict=True)):
        if fire.task_id not in left:
            kept.append(index)
            continue
        if (fire.task_id, fire.scheduled_at) in recorded:
            kept.append(index)  # a no-op insert: it neither spends nor is refused
            continue
        if left[fire.task_id] <= 0:
            continue
        kept.append(index)
        if status != _SKIPPED:
            left[fire.task_id] -= 1
    return kept


def remaining_runs_spend(
    inserted: Sequence[tuple[uuid.UUID, str, datetime]], *, now: datetime
) -> set[uuid.UUID]:
    """Take the runs inserted (task id, status, scheduled_at) off their tasks' counts; the
    tasks whose count reached 0 are paused. Returns those. One statement."""
    spent: Counter[uuid.UUID] = Counter()
    last: dict[uuid.UUID, datetime] = {}
    for task_id, status, scheduled_at in inserted:
        if status == _SKIPPED:
            continue
        spent[task_id] += 1
        last[task_id] = max(last.get(task_id, scheduled_at), scheduled_at)
    if not spent:
        return set()
    ids = list(spent)
    counts = [spent[task_id] for task_id in ids]
    notes = [exhausted_note(last[task_id]) for task_id in ids]
    table = TaskDefinition._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS t SET remaining_runs = GREATEST(t.remaining_runs - u.spent, 0), "
            "paused = t.paused OR t.remaining_runs <= u.spent, "
            "next_fire_at = CASE WHEN t.remaining_runs <= u.spent THEN NULL "
            "ELSE t.next_fire_at END, "
            "paused_at = CASE WHEN t.remaining_runs <= u.spent AND NOT t.paused THEN %s "
            "ELSE t.paused_at END, "
            "paused_by = CASE WHEN t.remaining_runs <= u.spent AND NOT t.paused THEN %s "
            "ELSE t.paused_by END, "
            "pause_note = CASE WHEN t.remaining_runs <= u.spent AND NOT t.paused THEN u.note "
            "ELSE t.pause_note END, "
            "changed_at = CASE WHEN t.remaining_runs <= u.spent THEN %s ELSE t.changed_at END, "
            "updated_at = CASE WHEN t.remaining_runs <= u.spent THEN %s ELSE t.updated_at END "
            "FROM unnest(%s::uuid[], %s::int[], %s::text[]) AS u(id, spent, note) "
            "WHERE t.id = u.id AND t.remaining_runs IS NOT NULL "
            "RETURNING t.id, t.remaining_runs",
            [now, PAUSED_BY, now, now, ids, counts, notes],
        )
        return {task_id for task_id, left in cursor.fetchall() if left == 0}
