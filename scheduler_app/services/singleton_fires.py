"""A singleton task's schedule fires (services.flow_triggers is its triggers' side).

A fire of a singleton task whose key already has an active run is recorded `skipped`, naming
that run, and the run's `trigger_count` goes up; a fire that records a run gives the run its
key. Both happen in the fires' own transaction (`firing.fires_record`) under the key's
advisory lock, the lock a trigger takes: a trigger and a fire at the same instant make one run.

The key is rendered from the task's own parameters (a fire has no others), so a singleton
key over `parameters.*` is constant across a task's fires. The batch pays one probe of a
partial index that holds only singleton tasks (`idx_task_singleton`), and nothing else when
none of its tasks is one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db.models import F

from scheduler_app.choices import ACTIVE_STATUSES, ExecutionStatus
from scheduler_app.db_rows import server_bound_cursor
from scheduler_app.flow_trigger_spec import SINGLETON, KeyContext, flow_key_render
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.run_key_templates import KeyTemplateError
from scheduler_app.services.flow_triggers import FlowKey, flow_key_lock


def singleton_fire_keys(task_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The rendered keys of the singleton tasks among these, their keys locked (in lock order,
    so two leaders recording one batch cannot deadlock). A key a template cannot render
    (over the budget) is the task's name: the fire still has one key."""
    ids = list(set(task_ids))
    if not ids:
        return {}
    # Bound on the server in binary, as the remaining-runs probe: a batch's thousand ids cost
    # no quoting into the SQL text, and the partial index holds only the singleton tasks.
    with server_bound_cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {TaskDefinition._meta.db_table} "  # noqa: S608 (the model's table)
            "WHERE singleton IS NOT NULL AND id = ANY(%b::uuid[])",
            [ids],
        )
        singleton_ids = [row[0] for row in cursor.fetchall()]
    if not singleton_ids:
        return {}
    tasks = TaskDefinition.platform.filter(id__in=singleton_ids).select_related("tenant")
    keys: dict[uuid.UUID, str] = {}
    for task in tasks:
        context = KeyContext(
            parameters=task.parameters or {}, task=task.name, dag="", tenant=task.tenant.slug
        )
        try:
            keys[task.id] = flow_key_render(
                task.singleton["key"], context=context, budget=expression_budget()
            )
        except KeyTemplateError:
            keys[task.id] = task.name
    for task_id, key in sorted(keys.items(), key=lambda item: _order(item[0], item[1])):
        flow_key_lock(task_id, FlowKey(SINGLETON, key))
    return keys


def _order(task_id: uuid.UUID, key: str) -> tuple[str, str]:
    return str(task_id), key


def singleton_fire_statuses(
    task_ids: Sequence[uuid.UUID],
    statuses: list[tuple[str, str]],
    keys: dict[uuid.UUID, str],
    *,
    now: datetime,
) -> list[tuple[str, str]]:
    """The fires' (status, error_message), those of a singleton key with an active run (or
    an earlier fire of the batch that records one) turned `skipped` naming the run."""
    # The key's active run, or None once an earlier fire of this batch records one.
    active: dict[tuple[uuid.UUID, str], uuid.UUID | None] = {}
    rows = TaskExecution.platform.filter(
        task_id__in=list(keys),
        singleton_key__in=set(keys.values()),
        status__in=ACTIVE_STATUSES,
    ).values_list("task_id", "singleton_key", "id")
    for task_id, key, run_id in rows:
        if keys.get(task_id) == key:
            active.setdefault((task_id, key), run_id)
    joined: list[uuid.UUID] = []
    out = list(statuses)
    recording = (ExecutionStatus.QUEUED.value, ExecutionStatus.PENDING.value)
    for index, task_id in enumerate(task_ids):
        key = keys.get(task_id)
        if key is None or out[index][0] not in recording:
            continue
        if (task_id, key) not in active:
            active[(task_id, key)] = None  # this fire records the key's run
            continue
        run_id = active[(task_id, key)]
        if run_id is not None:
            joined.append(run_id)
        named = f"run {run_id}" if run_id is not None else "a run recorded with this fire"
        out[index] = (
            ExecutionStatus.SKIPPED.value,
            f"singleton: {named} of key {key!r} is still active",
        )
    if joined:
        TaskExecution.platform.filter(id__in=joined).update(
            trigger_count=F("trigger_count") + 1, updated_at=now
        )
    return out


def singleton_keys_record(
    inserted: Sequence[tuple[object, object, datetime, str]], keys: dict[uuid.UUID, str]
) -> None:
    """Give the runs the fires recorded (id, task id, scheduled_at, status) their keys."""
    recorded = (ExecutionStatus.QUEUED.value, ExecutionStatus.PENDING.value)
    by_key: dict[str, list[tuple[object, datetime]]] = {}
    for run_id, task_id, scheduled_at, status in inserted:
        key = keys.get(task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id)))
        if key is not None and status in recorded:
            by_key.setdefault(key, []).append((run_id, scheduled_at))
    for key, runs in by_key.items():
        TaskExecution.platform.filter(
            id__in=[run_id for run_id, _ in runs],
            scheduled_at__in=[scheduled_at for _, scheduled_at in runs],
        ).update(singleton_key=key)
