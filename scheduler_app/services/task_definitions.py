"""Writes to task definitions: create, update, soft delete, pause, resume, trigger."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduler_app.capabilities import queue_for
from scheduler_app.choices import DAG_NODE_TAG, ExecutionStatus, Trigger
from scheduler_app.errors import Conflict, NotFound, ValidationFailed
from scheduler_app.flow_trigger_spec import DEBOUNCE
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring_after_commit
from scheduler_app.services.audit import (
    audit_action,
    audit_unchanged,
    changed_fields,
    definition_fields,
)
from scheduler_app.services.fire_traces import trigger_traceparent
from scheduler_app.services.flow_triggers import flow_key_for, flow_run_join, flow_run_prepare
from scheduler_app.services.payload_quota import payload_bytes_charge, payload_cap_check
from scheduler_app.services.remaining_runs import spent_limit_cleared
from scheduler_app.services.secrets import secret_references_refuse
from scheduler_app.services.task_spec import POLICY_KEYS, policy_check, task_spec_to_fields
from scheduler_app.task_checks import task_checks_run
from scheduler_app.task_schedule import first_fire_after


def _refresh_next_fire(task: TaskDefinition, *, now: datetime) -> None:
    task.next_fire_at = first_fire_after(task, now)


def _save_checked(task: TaskDefinition) -> None:
    try:
        with transaction.atomic():
            task.save()
    except IntegrityError as error:
        if "uniq_task_name_per_tenant" in str(error) or "UNIQUE" in str(error).upper():
            raise Conflict(
                f"a task named {task.name!r} already exists in this tenant", field="name"
            ) from error
        raise


def _check_policies(task: TaskDefinition) -> None:
    policy_check(
        {
            "start_at": task.start_at,
            "end_at": task.end_at,
            "jitter_seconds": task.jitter_seconds,
            "schedule_type": task.schedule_type,
            "schedule_expression": task.schedule_expression,
            "timezone": task.timezone,
        },
        anchor=task.created_at,
    )
    if task.singleton and task.debounce:  # a PATCH may add one to a task that has the other
        raise ValidationFailed("give singleton or debounce, not both", field="debounce")


def _check_network_allowed(tenant: Tenant, fields: Mapping[str, Any]) -> None:
    """`"network": "egress"` only for a tenant the operator allowed it (the worker checks it
    again at run time, so a tenant whose right is withdrawn runs nothing with egress)."""
    config = fields.get("handler_config") or {}
    if config.get("network") == "egress" and not tenant.shell_egress_allowed:
        raise ValidationFailed(
            'network "egress" is not allowed for this tenant; the platform operator can '
            "allow it (tenant setting shell_egress_allowed)",
            field="handler.network",
        )


def _check_notifications(*, tenant_id: Any, fields: Mapping[str, Any]) -> None:
    """The apps' checks of what they own in a task (alerting: every notification target
    names a receiver the tenant has; 400 naming it if not)."""
    task_checks_run(tenant_id=tenant_id, fields=fields)


def task_create(*, tenant: Tenant, spec: Mapping[str, Any], created_by=None) -> TaskDefinition:
    now = timezone.now()
    fields = task_spec_to_fields(spec, anchor=now, allowed_hosts=tenant.webhook_allowed_hosts)
    _check_network_allowed(tenant, fields)
    _check_notifications(tenant_id=tenant.id, fields=fields)
    task = TaskDefinition(
        id=uuid.uuid4(),
        tenant=tenant,
        created_by=created_by,
        created_at=now,
        changed_at=now,
        **fields,
    )
    _check_policies(task)
    _refresh_next_fire(task, now=now)
    _save_checked(task)
    _audit(task, "task.create", after=definition_fields(task))
    return task


def _audit(task: TaskDefinition, verb: str, **change: Any) -> None:
    audit_action(tenant=task.tenant, verb=verb, object_type="task", object_id=task.id, **change)


def task_update(
    *, task: TaskDefinition, spec: Mapping[str, Any], partial: bool = False
) -> TaskDefinition:
    """PUT (partial=False: the whole definition) or PATCH (partial=True: the given keys).
    A task that runs an inline DAG node changes with its DAG, never on its own (Conflict):
    the engine reads it once per process (`dags.versions.dispatch_tasks`)."""
    if DAG_NODE_TAG in (task.tags or []):
        raise Conflict(
            "this task runs a node of a DAG and changes with it: update the DAG's definition",
            field="task",
        )
    now = timezone.now()
    fields = task_spec_to_fields(
        spec,
        anchor=task.created_at,
        partial=partial,
        allowed_hosts=task.tenant.webhook_allowed_hosts,
    )
    _check_network_allowed(task.tenant, fields)
    _check_notifications(tenant_id=task.tenant_id, fields=fields)
    before = definition_fields(task)
    if not partial:
        defaults = TaskDefinition()
        for name in (
            "description",
            "timeout_seconds",
            "max_attempts",
            "backoff",
            "base_delay_seconds",
            "max_delay_seconds",
            "priority",
            "parameters",
            "tags",
            "notifications",
            "idempotency_key",
            "singleton",
            "debounce",
            "owner",
            "flow_control",
            *POLICY_KEYS,
        ):
            fields.setdefault(name, getattr(defaults, name))
    for name, value in fields.items():
        setattr(task, name, value)
    _check_policies(task)
    task.changed_at = now
    _refresh_next_fire(task, now=now)
    _save_checked(task)
    changed_before, changed_after = changed_fields(before, definition_fields(task))
    if changed_after:
        _audit(task, "task.update", before=changed_before, after=changed_after)
    else:  # saved as it was: nothing to audit
        audit_unchanged()
    return task


def task_delete(*, task: TaskDefinition, note: str = "") -> None:
    """Soft delete: the definition and its history stay; it never fires again. `note`: why
    (kept in the audit log)."""
    now = timezone.now()
    deleted = TaskDefinition.objects.filter(
        tenant_id=task.tenant_id, id=task.id, deleted_at__isnull=True
    ).update(deleted_at=now, changed_at=now, next_fire_at=None, updated_at=now)
    if not deleted:
        return audit_unchanged()
    _audit(task, "task.delete", before={"deleted": False}, after={"deleted": True}, reason=note)


def task_pause(*, task: TaskDefinition, note: str = "", paused_by: str = "") -> TaskDefinition:
    """Pause with who did it and why (`paused_by`: "user:<name>", "apikey:<prefix>",
    "runbook", "remaining_runs"). Pausing a paused task keeps the first pause's record."""
    now = timezone.now()
    paused = TaskDefinition.objects.filter(
        tenant_id=task.tenant_id, id=task.id, deleted_at__isnull=True, paused=False
    ).update(
        paused=True,
        next_fire_at=None,
        paused_at=now,
        paused_by=paused_by,
        pause_note=note,
        changed_at=now,
        updated_at=now,
    )
    task.refresh_from_db()
    if not paused:
        audit_unchanged()
    else:
        _audit(task, "task.pause", before={"paused": False}, after={"paused": True}, reason=note)
    return task


def task_resume(*, task: TaskDefinition) -> TaskDefinition:
    """Resume computes the next fire from now: no burst of the fires missed while paused.
    The pause record and the runbook's failure count start again; a spent
    `policy.remaining_runs` (0) is cleared: the schedule runs on without a limit."""
    now = timezone.now()
    was_paused = task.paused
    task.paused = False
    next_fire_at = first_fire_after(task, now)
    TaskDefinition.objects.filter(
        tenant_id=task.tenant_id, id=task.id, deleted_at__isnull=True
    ).update(
        paused=False,
        next_fire_at=next_fire_at,
        paused_at=None,
        paused_by="",
        pause_note="",
        consecutive_failures=0,
        remaining_runs=spent_limit_cleared(),
        changed_at=now,
        updated_at=now,
    )
    task.refresh_from_db()
    # Recorded even when it was not paused: the next fire was recomputed from now.
    _audit(task, "task.resume", before={"paused": was_paused}, after={"paused": False})
    return task


def task_set_enabled(*, task: TaskDefinition, enabled: bool) -> TaskDefinition:
    now = timezone.now()
    was_enabled = task.enabled
    task.enabled = enabled
    TaskDefinition.objects.filter(
        tenant_id=task.tenant_id, id=task.id, deleted_at__isnull=True
    ).update(
        enabled=enabled,
        next_fire_at=first_fire_after(task, now),
        changed_at=now,
        updated_at=now,
    )
    task.refresh_from_db()
    verb = "task.enable" if enabled else "task.disable"
    _audit(task, verb, before={"enabled": was_enabled}, after={"enabled": enabled})
    return task


TRIGGER_SPAN = "scheduler.trigger"


@dataclass(frozen=True)
class Triggered:
    execution: TaskExecution
    # "" for a new run; "singleton" when the key's active run answered the trigger, or
    # "debounce" when the key's pending run absorbed it (services.flow_triggers).
    joined: str = ""


def task_trigger(
    *,
    task: TaskDefinition,
    parameters: Mapping[str, Any] | None = None,
    trigger: str = Trigger.MANUAL,
    max_attempts: int | None = None,
    rerun_of: uuid.UUID | None = None,
) -> TaskExecution:
    """`task_trigger_outcome`'s run, for callers that need not know whether it is new."""
    return task_trigger_outcome(
        task=task,
        parameters=parameters,
        trigger=trigger,
        max_attempts=max_attempts,
        rerun_of=rerun_of,
    ).execution


def task_trigger_outcome(
    *,
    task: TaskDefinition,
    parameters: Mapping[str, Any] | None = None,
    trigger: str = Trigger.MANUAL,
    max_attempts: int | None = None,
    rerun_of: uuid.UUID | None = None,
    now: datetime | None = None,
) -> Triggered:
    """Run now, outside the schedule. The row is committed first, then the doorbell rings.
    A singleton or debounced task's trigger may instead join its key's run (`Triggered.joined`;
    `services.flow_triggers`).
    `trigger`: `event` for a run an event schedule started, `runbook` for the runbook's one
    retry (`max_attempts` 1: its failure is the final word, not the start of a retry series),
    `rerun` for an operator's re-run of the ended run `rerun_of` (a new chain that points back
    at it; `runs.reruns`).
    The parameters are size-capped (413) and counted against the tenant's bytes quota (429,
    `services.payload_quota`)."""
    if task.deleted_at is not None:
        raise NotFound("task not found")
    secret_references_refuse(parameters=parameters)
    size = payload_cap_check(tenant_id=task.tenant_id, value=parameters, field="parameters")
    flow = flow_key_for(task=task, parameters=parameters, trigger=trigger)
    now = now or timezone.now()  # a test's clock: a debounce window is measured from it
    queue = queue_for(priority=task.priority, capability=task.capability)
    execution_id = uuid.uuid4()
    execution = TaskExecution(
        id=execution_id,
        # A run started by hand, an event or the runbook begins its trace here (under the
        # request's span when the web tier's Django is instrumented).
        traceparent=trigger_traceparent(
            name=TRIGGER_SPAN,
            attributes={
                "scheduler.task.id": str(task.id),
                "scheduler.tenant.id": str(task.tenant_id),
                "scheduler.execution.id": str(execution_id),
                "scheduler.trigger": str(trigger),
            },
        ),
        tenant_id=task.tenant_id,
        task=task,
        status=ExecutionStatus.QUEUED,
        trigger=trigger,
        priority=task.priority,
        queue=queue,
        scheduled_at=now,
        queued_at=now,
        attempt=1,
        max_attempts=max_attempts or task.max_attempts,
    )
    execution.root_execution_id = execution.id
    execution.retry_of_id = rerun_of
    execution.parameters = dict(parameters) if parameters else None
    with transaction.atomic():
        joined = None
        if flow is not None:
            joined = flow_run_join(task=task, flow=flow, parameters=parameters, now=now)
        if flow is not None and joined is not None:
            if flow.kind == DEBOUNCE and trigger != Trigger.EVENT:  # it keeps the parameters
                payload_bytes_charge(tenant_id=task.tenant_id, size=size, field="parameters")
            after = {"run": str(joined.id), "trigger": str(trigger), "joined": flow.kind}
            _audit(task, "task.trigger", after=after)
            return Triggered(joined, flow.kind)
        if flow is not None:
            flow_run_prepare(execution=execution, flow=flow, now=now)
        execution.save(force_insert=True)
        if execution.status == ExecutionStatus.QUEUED:  # a debounced run waits as pending
            bell = Doorbell(
                str(execution.id),
                str(task.tenant_id),
                queue,
                task_name=task.name,
                traceparent=execution.traceparent,
            )
            ring_after_commit([bell])
        if trigger != Trigger.EVENT:  # an event's runs are charged with the event
            payload_bytes_charge(tenant_id=task.tenant_id, size=size, field="parameters")
        _audit(task, "task.trigger", after={"run": str(execution.id), "trigger": str(trigger)})
    return Triggered(execution)
