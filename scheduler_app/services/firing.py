"""The leader's writes: record due fires in batches, promote due pending rows, requeue strays.

Each function returns the doorbells to ring for the rows it actually changed, so a fire
that another scheduler already recorded (ON CONFLICT DO NOTHING) is never published twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from scheduler_app.choices import ExecutionStatus, Overlap, Trigger
from scheduler_app.db_rows import server_bound_cursor
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.services.fire_traces import fire_spans_start
from scheduler_app.services.remaining_runs import (
    fires_within_remaining,
    limited_remaining_lock,
    remaining_runs_spend,
)
from scheduler_app.services.singleton_fires import (
    singleton_fire_keys,
    singleton_fire_statuses,
    singleton_keys_record,
)


@dataclass(frozen=True)
class Fire:
    task_id: uuid.UUID
    tenant_id: uuid.UUID
    scheduled_at: datetime
    priority: int
    queue: str
    max_attempts: int
    overlap: str = Overlap.ALLOW


_ACTIVE = (
    ExecutionStatus.PENDING.value,
    ExecutionStatus.QUEUED.value,
    ExecutionStatus.RUNNING.value,
)
_WAITING = (ExecutionStatus.PENDING.value, ExecutionStatus.QUEUED.value)


def _active_runs(task_ids: set[uuid.UUID]) -> dict[uuid.UUID, set[str]]:
    """Statuses of the active executions of these tasks (served by the active-state index)."""
    active: dict[uuid.UUID, set[str]] = {task_id: set() for task_id in task_ids}
    rows = TaskExecution.platform.filter(task_id__in=task_ids, status__in=_ACTIVE).values_list(
        "task_id", "status"
    )
    for task_id, status in rows:
        active[task_id].add(status)
    return active


def _overlap_statuses(fires: Sequence[Fire]) -> tuple[list[tuple[str, str]], list[uuid.UUID]]:
    """(status, error_message) per fire under each task's overlap policy, and the tasks whose
    waiting runs a `cancel_other` fire supersedes. Fires of one task are taken in order, so a
    catch-up burst under `skip` records one run and skips the rest."""
    guarded = {fire.task_id for fire in fires if fire.overlap != Overlap.ALLOW}
    active = _active_runs(guarded) if guarded else {}
    outcome: list[tuple[str, str]] = []
    cancel_waiting: list[uuid.UUID] = []
    for fire in fires:
        runs = active.get(fire.task_id)
        if fire.overlap == Overlap.ALLOW or runs is None:
            outcome.append((ExecutionStatus.QUEUED.value, ""))
            continue
        if not runs or fire.overlap == Overlap.CANCEL_OTHER:
            if runs and fire.overlap == Overlap.CANCEL_OTHER:
                cancel_waiting.append(fire.task_id)
            outcome.append((ExecutionStatus.QUEUED.value, ""))
            runs.clear()
            runs.add(ExecutionStatus.QUEUED.value)
        elif fire.overlap == Overlap.BUFFER_ONE and not runs & set(_WAITING):
            # Held as pending; `due_pending_promote` releases it once the running one ends.
            outcome.append((ExecutionStatus.PENDING.value, ""))
            runs.add(ExecutionStatus.PENDING.value)
        else:
            outcome.append(
                (ExecutionStatus.SKIPPED.value, "overlap: an earlier run is still active")
            )
    return outcome, cancel_waiting


def _cancel_waiting(task_ids: list[uuid.UUID], *, now: datetime) -> None:
    """`cancel_other`: waiting runs of these tasks are cancelled (a conditional UPDATE, so a
    run a worker claims meanwhile is left alone). Stopping a *running* one is the worker's
    cancellation path, not the scheduler's."""
    TaskExecution.platform.filter(task_id__in=task_ids, status__in=_WAITING).update(
        status=ExecutionStatus.CANCELLED,
        error_message="overlap: superseded by a newer fire",
        completed_at=now,
        updated_at=now,
    )


def _db_value(column: str, value: object) -> object:
    field = TaskExecution._meta.get_field(
        column.removesuffix("_id") if column in ("tenant_id", "task_id") else column
    )
    if column in ("tenant_id", "task_id"):
        field = field.target_field
    return field.get_db_prep_value(value, connection, prepared=False)


def fires_record(fires: Sequence[Fire], *, now: datetime) -> list[Doorbell]:
    """INSERT the fires as queued executions; returns doorbells for the rows inserted.

    One statement per batch; UNIQUE(task, scheduled_at, attempt) turns a fire that any
    scheduler already recorded into a no-op, which is what makes a fire happen once.
    A task with `policy.remaining_runs` spends its count in the same transaction and pauses
    at 0 (`remaining_runs`); a batch without one pays one probe of a near-empty index.
    """
    if not fires:
        return []
    # savepoint=False: the engine records a batch and its next fires in one transaction.
    with transaction.atomic(savepoint=False):
        statuses, cancel_waiting = _overlap_statuses(fires)
        singletons = singleton_fire_keys(fire.task_id for fire in fires)
        if singletons:
            task_ids = [fire.task_id for fire in fires]
            statuses = singleton_fire_statuses(task_ids, statuses, singletons, now=now)
        remaining = limited_remaining_lock(fire.task_id for fire in fires)
        if remaining:
            kept = fires_within_remaining(fires, statuses, remaining)
            fires = [fires[index] for index in kept]
            statuses = [statuses[index] for index in kept]
            firing = {fire.task_id for fire in fires}
            cancel_waiting = [task_id for task_id in cancel_waiting if task_id in firing]
        return _fires_record(
            fires,
            statuses,
            cancel_waiting,
            now=now,
            limited=set(remaining),
            singletons=singletons,
        )


# A batch is one INSERT ... SELECT FROM unnest(arrays): one short, constant
# statement whatever the batch size (a VALUES list of 18 x 2,000 parameters spends more time
# in client-side query building than in the database).
_UNNEST_INSERT = """
INSERT INTO {table} (id, tenant_id, task_id, status, priority, queue, scheduled_at,
    max_attempts, error_message, root_execution_id, trigger, queued_at, attempt, worker_id,
    error_class, dead_lettered, created_at, updated_at, traceparent)
SELECT u.id, u.tenant_id, u.task_id, u.status, u.priority, u.queue, u.scheduled_at,
    u.max_attempts, u.error_message, u.id, %b, %b, 1, '', '', false, %b, %b,
    coalesce(u.traceparent, '')
FROM unnest(%b::uuid[], %b::uuid[], %b::uuid[], %b::text[], %b::int[], %b::text[],
    %b::timestamptz[], %b::int[], %b::text[], %b::text[])
    AS u(id, tenant_id, task_id, status, priority, queue, scheduled_at, max_attempts,
         error_message, traceparent)
ON CONFLICT (task_id, scheduled_at, attempt) DO NOTHING
RETURNING id, tenant_id, queue, status, task_id, scheduled_at, traceparent
"""


def _fires_record(
    fires: Sequence[Fire],
    statuses: list[tuple[str, str]],
    cancel_waiting: list[uuid.UUID],
    *,
    now: datetime,
    limited: set[uuid.UUID],
    singletons: dict[uuid.UUID, str],
) -> list[Doorbell]:
    if not fires:
        return []
    columns: list[list[object]] = [[] for _ in range(9)]
    for fire, (status, error_message) in zip(fires, statuses, strict=True):
        for column, value in zip(
            columns,
            (
                uuid.uuid4(),
                fire.tenant_id,
                fire.task_id,
                status,
                fire.priority,
                fire.queue,
                fire.scheduled_at,
                fire.max_attempts,
                error_message,
            ),
            strict=True,
        ):
            column.append(value)
    sql = _UNNEST_INSERT.format(table=TaskExecution._meta.db_table)
    # Tracing on: one span per fire, its context written with the row (a NULL array while
    # off: the statement is the same, and no per-fire work is done).
    spans = fire_spans_start(fires, execution_ids=columns[0])
    if cancel_waiting:
        _cancel_waiting(cancel_waiting, now=now)
    with server_bound_cursor() as cursor:
        cursor.execute(
            sql, [Trigger.SCHEDULE.value, now, now, now, *columns, spans and spans.traceparents]
        )
        inserted = cursor.fetchall()
    if singletons:
        singleton_keys_record([(row[0], row[4], row[5], row[3]) for row in inserted], singletons)
    queued = ExecutionStatus.QUEUED.value
    bells = [_doorbell(*row[:3], row[4], row[6]) for row in inserted if row[3] == queued]
    if spans:
        # The doorbells' fire spans stay open until their ring (`fire_traces`).
        spans.end(
            recorded={row[0] for row in inserted},
            to_ring={bell.execution_id for bell in bells},
        )
    if limited:
        remaining_runs_spend(
            [(row[4], row[3], row[5]) for row in inserted if row[4] in limited], now=now
        )
    return bells


def _doorbell(
    execution_id: object,
    tenant_id: object,
    queue: object,
    task_id: object,
    traceparent: str = "",
) -> Doorbell:
    # The task id lets publish name the message after the task from its cache (Flower); the
    # trace context lets the ring's span join the run's trace (it is not sent).
    return Doorbell(
        str(execution_id), str(tenant_id), str(queue), task_id=str(task_id), traceparent=traceparent
    )


def _mark_queued(
    *, where_sql: str, where_params: list[object], now: datetime, limit: int
) -> list[Doorbell]:
    table = TaskExecution._meta.db_table
    now_db = _db_value("queued_at", now)
    # SKIP LOCKED: a row a worker is claiming right now is simply left for next time.
    sql = (
        f"UPDATE {table} SET status = %s, queued_at = %s, updated_at = %s "
        f"WHERE id IN (SELECT id FROM {table} WHERE {where_sql} "
        f"ORDER BY scheduled_at LIMIT %s FOR UPDATE SKIP LOCKED) "
        f"AND {where_sql} RETURNING id, tenant_id, queue, task_id, traceparent"
    )
    params = [ExecutionStatus.QUEUED.value, now_db, now_db, *where_params, limit, *where_params]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_doorbell(*row) for row in cursor.fetchall()]


def due_pending_promote(
    *, now: datetime, limit: int, per_tenant: int | None = None
) -> list[Doorbell]:
    """pending rows whose time has come (retries, deferred runs) -> queued.

    A task with overlap=buffer_one keeps its pending run back while another of its runs is
    running. Fair: at most `per_tenant` rows per (tenant, tier) a call (default
    FAIR_INFLIGHT_PER_TENANT; the leader passes the current fair-dispatch cap), oldest
    first, so one tenant's backlog of due rows cannot fill every batch and starve another
    tenant's retry (fair dispatch would hold back the extra rows of that tenant anyway).
    """
    table = TaskExecution._meta.db_table
    tasks = TaskDefinition._meta.db_table
    held_back = (
        f"NOT EXISTS (SELECT 1 FROM {tasks} t WHERE t.id = {table}.task_id AND t.overlap = %s "
        f"AND EXISTS (SELECT 1 FROM {table} r WHERE r.task_id = t.id AND r.status = %s))"
    )
    due_params: list[object] = [ExecutionStatus.PENDING.value, _db_value("scheduled_at", now)]
    # A run waiting on a flow-control limit comes back at its wake time (a recheck for a slot,
    # a rate window's opening), keeping its scheduled_at: its place in the line.
    where_sql = (
        f"status = %s AND scheduled_at <= %s AND {held_back} "
        "AND (flow_wake_at IS NULL OR flow_wake_at <= %s)"
    )
    where_params: list[object] = [
        *due_params,
        Overlap.BUFFER_ONE.value,
        ExecutionStatus.RUNNING.value,
        _db_value("flow_wake_at", now),
    ]
    if per_tenant is None:
        per_tenant = settings.FAIR_INFLIGHT_PER_TENANT
    if per_tenant > 0:
        where_sql += (
            f" AND id IN (SELECT id FROM (SELECT id, waiting_for, ROW_NUMBER() OVER ("
            # Waiting runs of one flow key are their own group: a key's backlog, oldest
            # first, cannot crowd out the other keys' waiters (fair across keys). Of a key's
            # line only its head comes back at a recheck, as many as the limit's maximum
            # (what could start at once): a finish hands its slots on by itself
            # (`flow_admission.flow_waiters_wake`), so the recheck is a fallback, and the
            # whole line rechecked would only be turned away again.
            f"PARTITION BY tenant_id, queue, waiting_for ->> 'key' ORDER BY scheduled_at) "
            "AS tenant_rank "
            f"FROM {table} WHERE status = %s AND scheduled_at <= %s) ranked "
            "WHERE tenant_rank <= least(%s, greatest(1, coalesce((waiting_for ->> 'max')::int, "
            "%s))))"
        )
        where_params = [*where_params, *due_params, per_tenant, per_tenant]
    return _mark_queued(where_sql=where_sql, where_params=where_params, now=now, limit=limit)


def stale_queued_requeue(*, now: datetime, grace_seconds: float, limit: int) -> list[Doorbell]:
    """Queued rows nobody started within the grace period: their doorbell was lost
    (Redis restarted, a publish failed after commit). Ring it again; the claim dedupes."""
    cutoff = _db_value("queued_at", now - timedelta(seconds=grace_seconds))
    return _mark_queued(
        where_sql="status = %s AND queued_at < %s",
        where_params=[ExecutionStatus.QUEUED.value, cutoff],
        now=now,
        limit=limit,
    )


def takeover_queued_republish(*, since: datetime, now: datetime, limit: int) -> list[Doorbell]:
    """Ring again the queued rows recorded since `since` that nobody started yet.

    A leader killed between committing a batch and publishing it leaves queued rows without
    a doorbell; the leader that takes over republishes its predecessor's last seconds at once
    instead of waiting for the requeue grace. Rows that did get their doorbell get a second
    one, which the worker's claim (compare-and-swap) drops: at least once from the broker,
    once per attempt in the database."""
    return _mark_queued(
        where_sql="status = %s AND queued_at >= %s AND queued_at < %s",
        where_params=[
            ExecutionStatus.QUEUED.value,
            _db_value("queued_at", since),
            _db_value("queued_at", now),
        ],
        now=now,
        limit=limit,
    )


def next_fires_save(updates: Sequence[tuple[uuid.UUID, datetime | None, datetime]]) -> None:
    """Persist where each fired task's schedule now stands (task id, next fire, last fired)."""
    if not updates:
        return
    table = TaskDefinition._meta.db_table
    # One statement per batch instead of one UPDATE per task.
    ids, nexts, lasts = (list(column) for column in zip(*updates, strict=True))
    with transaction.atomic(savepoint=False), server_bound_cursor() as cursor:
        cursor.execute(
            # A task paused meanwhile (its remaining runs spent in this batch) keeps no next fire.
            f"UPDATE {table} AS t SET next_fire_at = CASE WHEN t.paused THEN NULL "
            "ELSE u.next_fire_at END, "
            "last_fired_at = u.last_fired_at FROM unnest(%b::uuid[], %b::timestamptz[], "
            "%b::timestamptz[]) AS u(id, next_fire_at, last_fired_at) WHERE t.id = u.id",
            [ids, nexts, lasts],
        )


def queued_hold_back(*, execution_ids: Sequence[str]) -> int:
    """queued -> pending (same scheduled_at) for doorbells fair dispatch did not send yet."""
    return TaskExecution.platform.filter(
        id__in=list(execution_ids), status=ExecutionStatus.QUEUED
    ).update(status=ExecutionStatus.PENDING, queued_at=None)
