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

from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.dispatch import Doorbell
from scheduler_app.models import TaskDefinition, TaskExecution


@dataclass(frozen=True)
class Fire:
    task_id: uuid.UUID
    tenant_id: uuid.UUID
    scheduled_at: datetime
    priority: int
    queue: str
    max_attempts: int


_FIRE_COLUMNS = (
    "id",
    "tenant_id",
    "task_id",
    "status",
    "trigger",
    "priority",
    "queue",
    "scheduled_at",
    "queued_at",
    "attempt",
    "max_attempts",
    "root_execution_id",
    "worker_id",
    "error_message",
    "error_class",
    "dead_lettered",
    "created_at",
    "updated_at",
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
    """
    if not fires:
        return []
    table = TaskExecution._meta.db_table
    columns = ", ".join(_FIRE_COLUMNS)
    placeholders = "(" + ", ".join(["%s"] * len(_FIRE_COLUMNS)) + ")"
    params: list[object] = []
    for fire in fires:
        execution_id = uuid.uuid4()
        row = {
            "id": execution_id,
            "tenant_id": fire.tenant_id,
            "task_id": fire.task_id,
            "status": ExecutionStatus.QUEUED.value,
            "trigger": Trigger.SCHEDULE.value,
            "priority": fire.priority,
            "queue": fire.queue,
            "scheduled_at": fire.scheduled_at,
            "queued_at": now,
            "attempt": 1,
            "max_attempts": fire.max_attempts,
            "root_execution_id": execution_id,
            "worker_id": "",
            "error_message": "",
            "error_class": "",
            "dead_lettered": False,
            "created_at": now,
            "updated_at": now,
        }
        params.extend(_db_value(column, row[column]) for column in _FIRE_COLUMNS)
    # Identifiers come from the model's metadata, values are all bound parameters.
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES "
        + ", ".join([placeholders] * len(fires))
        + " ON CONFLICT (task_id, scheduled_at, attempt) DO NOTHING"
        + " RETURNING id, tenant_id, queue"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        inserted = cursor.fetchall()
    return [_doorbell(row) for row in inserted]


def _doorbell(row: Sequence[object]) -> Doorbell:
    execution_id, tenant_id, queue = row
    return Doorbell(str(uuid.UUID(str(execution_id))), str(uuid.UUID(str(tenant_id))), str(queue))


def _mark_queued(
    *, where_sql: str, where_params: list[object], now: datetime, limit: int
) -> list[Doorbell]:
    table = TaskExecution._meta.db_table
    now_db = _db_value("queued_at", now)
    if connection.vendor == "postgresql":
        # SKIP LOCKED: a row a worker is claiming right now is simply left for next time.
        sql = (
            f"UPDATE {table} SET status = %s, queued_at = %s, updated_at = %s "
            f"WHERE id IN (SELECT id FROM {table} WHERE {where_sql} "
            f"ORDER BY scheduled_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            f"AND {where_sql} RETURNING id, tenant_id, queue"
        )
        params = [ExecutionStatus.QUEUED.value, now_db, now_db, *where_params, limit, *where_params]
    else:
        sql = (
            f"UPDATE {table} SET status = %s, queued_at = %s, updated_at = %s "
            f"WHERE id IN (SELECT id FROM {table} WHERE {where_sql} "
            f"ORDER BY scheduled_at LIMIT %s) AND {where_sql} RETURNING id, tenant_id, queue"
        )
        params = [ExecutionStatus.QUEUED.value, now_db, now_db, *where_params, limit, *where_params]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_doorbell(row) for row in cursor.fetchall()]


def due_pending_promote(*, now: datetime, limit: int) -> list[Doorbell]:
    """pending rows whose time has come (retries, deferred runs) -> queued.

    Fair: at most FAIR_INFLIGHT_PER_TENANT rows per (tenant, tier) a call, oldest first, so
    one tenant's backlog of due rows cannot fill every batch and starve another tenant's
    retry (fair dispatch would hold back the extra rows of that tenant anyway).
    """
    where_sql = "status = %s AND scheduled_at <= %s"
    where_params: list[object] = [ExecutionStatus.PENDING.value, _db_value("scheduled_at", now)]
    per_tenant = settings.FAIR_INFLIGHT_PER_TENANT
    if per_tenant > 0:
        table = TaskExecution._meta.db_table
        where_sql += (
            f" AND id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER ("
            f"PARTITION BY tenant_id, queue ORDER BY scheduled_at) AS tenant_rank "
            f"FROM {table} WHERE status = %s AND scheduled_at <= %s) ranked "
            f"WHERE tenant_rank <= %s)"
        )
        where_params = [*where_params, *where_params, per_tenant]
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


def next_fires_save(updates: Sequence[tuple[uuid.UUID, datetime | None, datetime]]) -> None:
    """Persist where each fired task's schedule now stands (task id, next fire, last fired)."""
    if not updates:
        return
    table = TaskDefinition._meta.db_table
    id_field = TaskDefinition._meta.get_field("id")
    time_field = TaskDefinition._meta.get_field("next_fire_at")
    rows = [
        (
            time_field.get_db_prep_value(next_fire_at, connection),
            time_field.get_db_prep_value(last_fired_at, connection),
            id_field.get_db_prep_value(task_id, connection),
        )
        for task_id, next_fire_at, last_fired_at in updates
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET next_fire_at = %s, last_fired_at = %s WHERE id = %s",
            rows,
        )


def queued_hold_back(*, execution_ids: Sequence[str]) -> int:
    """queued -> pending (same scheduled_at) for doorbells fair dispatch did not send yet."""
    return TaskExecution.objects.filter(
        id__in=list(execution_ids), status=ExecutionStatus.QUEUED
    ).update(status=ExecutionStatus.PENDING, queued_at=None)
