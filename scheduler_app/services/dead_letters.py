"""The dead-letter queue: runs whose last attempt failed. Retry them afresh or dismiss them.
A DAG node's dead letter is retried inside its run instead: `runs.dead_letters` decides."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.audit import audit_action, audit_unchanged
from scheduler_app.services.retries import fresh_run_create


def dead_letter_fresh_run(*, execution: TaskExecution) -> TaskExecution | None:
    """Start a fresh run (attempt 1, the task's full retry budget) of a dead-lettered one.

    The conditional UPDATE takes it out of the queue first, so a double click retries once.
    Returns None when it was no longer dead-lettered."""
    now = timezone.now()
    with transaction.atomic():
        taken = TaskExecution.platform.filter(id=execution.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=now
        )
        if taken != 1:
            audit_unchanged()
            return None
        fresh = fresh_run_create(previous=execution, now=now)
        audit_action(
            tenant=execution.tenant,
            verb="dlq.retry",
            object_type="execution",
            object_id=execution.id,
            before={"dead_lettered": True},
            after={"dead_lettered": False, "retry": str(fresh.id) if fresh else None},
        )
        return fresh


def dead_letter_delete(*, execution: TaskExecution, note: str = "") -> bool:
    """Dismiss from the queue; the execution stays in the history (dead_lettered_at kept).
    `note`: why (kept in the audit log)."""
    dismissed = (
        TaskExecution.platform.filter(id=execution.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=timezone.now()
        )
        == 1
    )
    if not dismissed:
        audit_unchanged()
    else:
        audit_action(
            tenant=execution.tenant,
            verb="dlq.delete",
            object_type="execution",
            object_id=execution.id,
            before={"dead_lettered": True},
            after={"dead_lettered": False},
            reason=note,
        )
    return dismissed
