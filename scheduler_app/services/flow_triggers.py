"""Singleton and debounce applied to a trigger (issue 29, item 4; the spec is
`scheduler_app/flow_trigger_spec.py`).

Rows, not timers. A trigger of a singleton or debounced task renders its key, then takes a
transaction-scoped advisory lock on (task, kind, key) and looks for the key's run:

* singleton: an active (pending, queued or running) run of the key answers the trigger; its
  `trigger_count` goes up and no run is made. Else the new run is recorded with the key.
* debounce: the key's *pending* run absorbs the trigger: its parameters become this
  trigger's, its `scheduled_at` moves to now + seconds (never past `debounce_until`, its
  first trigger + max_wait_seconds) and its `trigger_count` goes up, in one conditional
  UPDATE. Else the new run is recorded as `pending` at now + seconds; the beat leader's
  promote loop (`due_pending_promote`) rings it when that time comes, as it does a retry.

Why a lock and not a unique index: the executions table is partitioned by `scheduled_at`,
and PostgreSQL holds a unique index on a partitioned table only if it includes the partition
key, which would make (task, key, scheduled_at) unique, not (task, key). The lock is held to
the commit, and under READ COMMITTED the next holder's lookup (a new statement) sees the
run the previous holder committed, so two triggers at once make one run. The partial
indexes `idx_exec_singleton_active` and `idx_exec_debounce_pending` keep the lookup short.

A debounced run that the promote loop is taking (`FOR UPDATE SKIP LOCKED`, then
`queued`) is either locked first by the promoter, so this trigger's UPDATE finds it no
longer pending and starts a new window; or updated first by this trigger, so the promoter
sees its new `scheduled_at` and leaves it. A beat or web restart loses nothing: the window
is the row.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Least

from scheduler_app.choices import ACTIVE_STATUSES, ExecutionStatus, Trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.flow_spec import FlowSpecError
from scheduler_app.flow_trigger_spec import (
    DEBOUNCE,
    SINGLETON,
    KeyContext,
    flow_key_render,
    flow_trigger_fields,
)
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.run_key_templates import KeyTemplateError

# The triggers singleton and debounce apply to: a person's or a client's trigger and an
# event's. A re-run and the runbook's retry are explicit requests for one more run of an
# ended one, and keep making it.
FLOW_TRIGGERS = (Trigger.MANUAL, Trigger.EVENT)


@dataclass(frozen=True)
class FlowKey:
    kind: str  # SINGLETON or DEBOUNCE
    key: str
    seconds: int = 0  # debounce only
    max_wait_seconds: int = 0


def flow_trigger_task_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`task_spec_to_fields`' part for `singleton` and `debounce`: a 400 naming the field."""
    try:
        return flow_trigger_fields(spec, budget=expression_budget())
    except FlowSpecError as error:
        raise ValidationFailed(error.message, field=error.field) from error


def flow_key_for(
    *, task: TaskDefinition, parameters: Mapping[str, Any] | None, trigger: str
) -> FlowKey | None:
    """The flow key a trigger of `task` takes, None when neither applies."""
    if trigger not in FLOW_TRIGGERS or not (task.singleton or task.debounce):
        return None
    context = KeyContext(
        parameters={**(task.parameters or {}), **(parameters or {})},
        task=task.name,
        dag="",
        tenant=task.tenant.slug,
    )
    block = task.singleton or task.debounce
    kind = SINGLETON if task.singleton else DEBOUNCE
    try:
        key = flow_key_render(block["key"], context=context, budget=expression_budget())
    except KeyTemplateError as error:
        raise ValidationFailed(f"{kind}.key: {error}", field="parameters") from error
    if kind == SINGLETON:
        return FlowKey(kind, key)
    return FlowKey(kind, key, int(block["seconds"]), int(block["max_wait_seconds"]))


def flow_key_lock(task_id: uuid.UUID, flow: FlowKey) -> None:
    """The key's transaction-scoped advisory lock (a trigger's and a singleton fire's)."""
    digest = hashlib.sha256(f"{task_id}:{flow.kind}:{flow.key}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest[:8], "big", signed=True)]
        )


def flow_run_join(
    *,
    task: TaskDefinition,
    flow: FlowKey,
    parameters: Mapping[str, Any] | None,
    now: datetime,
) -> TaskExecution | None:
    """Inside the trigger's transaction: lock the key, and return the key's run after this
    trigger joined it, or None when the trigger makes a new run (then `flow_run_prepare`)."""
    flow_key_lock(task.id, flow)
    runs = TaskExecution.objects.filter(tenant_id=task.tenant_id, task_id=task.id)
    if flow.kind == SINGLETON:
        existing = (
            runs.filter(singleton_key=flow.key, status__in=ACTIVE_STATUSES)
            .order_by("scheduled_at")
            .first()
        )
        if existing is None:
            return None
        runs.filter(id=existing.id, scheduled_at=existing.scheduled_at).update(
            trigger_count=F("trigger_count") + 1
        )
        existing.trigger_count += 1
        return existing
    pending = runs.filter(debounce_key=flow.key, status=ExecutionStatus.PENDING).first()
    if pending is None:
        return None
    moved = runs.filter(id=pending.id, status=ExecutionStatus.PENDING).update(
        parameters=dict(parameters) if parameters else None,
        scheduled_at=Least(Value(now + timedelta(seconds=flow.seconds)), F("debounce_until")),
        trigger_count=F("trigger_count") + 1,
        updated_at=now,
    )
    if not moved:  # the promote loop took it between the two statements: a new window
        return None
    return runs.select_related("task").get(id=pending.id)


def flow_run_prepare(*, execution: TaskExecution, flow: FlowKey, now: datetime) -> None:
    """Fill the new run's key; a debounced one waits as pending for its quiet window."""
    if flow.kind == SINGLETON:
        execution.singleton_key = flow.key
        return
    execution.debounce_key = flow.key
    execution.status = ExecutionStatus.PENDING
    execution.queued_at = None
    execution.scheduled_at = now + timedelta(seconds=flow.seconds)
    execution.debounce_until = now + timedelta(seconds=flow.max_wait_seconds)
