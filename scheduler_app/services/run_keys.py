"""A keyed run's idempotency (§12), decided just before its handler would start.

The key is rendered once per fire (its first attempt) and recorded on the execution;
retries carry it (execution_follow_up_create). If an execution of the same task already
succeeded under that key, this run is not run: it ends `skipped`, naming that execution.

The check is a read before the handler, not a lock: two runs of one key that start at the
same instant both run (at-least-once, like every run); one that starts after the other
succeeded is skipped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from scheduler_app.choices import ExecutionStatus
from scheduler_app.idempotency_keys import KeyTemplateError, key_render
from scheduler_app.models import TaskDefinition, TaskExecution


@dataclass(frozen=True)
class RunKey:
    key: str
    succeeded_before: uuid.UUID | None = None  # the earlier success under the same key
    error: str = ""  # the key could not be rendered (a parameter it names is missing)


def execution_key_settle(
    *, execution: TaskExecution, task: TaskDefinition, claim_token: uuid.UUID
) -> RunKey | None:
    """None for a task without a key; else the run's key, recorded on the execution with the
    earlier success it was skipped for, if any (only while this claim holds the run)."""
    if not task.idempotency_key and not execution.idempotency_key:
        return None
    key = execution.idempotency_key
    if not key:
        try:
            key = key_render(
                task.idempotency_key,
                parameters={**(task.parameters or {}), **(execution.parameters or {})},
                scheduled_at=execution.scheduled_at,
                timezone_name=task.timezone,
            )
        except KeyTemplateError as error:
            return RunKey(key="", error=f"idempotency_key: {error}")
    earlier = (
        TaskExecution.objects.filter(
            task_id=task.id, idempotency_key=key, status=ExecutionStatus.SUCCESS
        )
        .exclude(id=execution.id)
        .order_by("completed_at")
        .values_list("id", flat=True)
        .first()
    )
    TaskExecution.objects.filter(
        id=execution.id,
        scheduled_at=execution.scheduled_at,
        claim_token=claim_token,
        status=ExecutionStatus.RUNNING,
    ).update(idempotency_key=key, skipped_for_execution_id=earlier)
    execution.idempotency_key, execution.skipped_for_execution_id = key, earlier
    return RunKey(key=key, succeeded_before=earlier)
