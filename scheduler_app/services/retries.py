"""Manual retry of a finished execution that did not succeed."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.errors import Conflict
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring_after_commit
from scheduler_app.services.follow_ups import execution_follow_up_create

MANUALLY_RETRYABLE = (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.CANCELLED)


def execution_retry(*, execution: TaskExecution) -> TaskExecution:
    """A fresh run (attempt 1, the task's full retry budget) of a failed/timed-out/cancelled one.

    The row lock makes a double click retry once: the second sees the first's retry and
    gets a 409. Taking it out of the dead-letter queue happens in the same transaction.
    """
    if execution.status not in MANUALLY_RETRYABLE:
        raise Conflict(
            f"only a failed, timed_out or cancelled execution can be retried "
            f"(this one is {execution.status})",
            field="status",
        )
    now = timezone.now()
    with transaction.atomic():
        locked = TaskExecution.platform.select_for_update().get(id=execution.id)
        if TaskExecution.platform.filter(retry_of_id=locked.id, trigger="retry").exists():
            raise Conflict("this execution was already retried")
        TaskExecution.platform.filter(id=locked.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=now
        )
        return fresh_run_create(previous=locked, now=now)


def fresh_run_create(*, previous: TaskExecution, now: datetime) -> TaskExecution:
    """A new first attempt of `previous`'s fire with the task's full retry budget, queued now
    and rung once the caller's transaction commits (a manual retry, a dead letter's retry)."""
    task = previous.task
    retry = execution_follow_up_create(
        previous=previous,
        status=ExecutionStatus.QUEUED,
        scheduled_at=now,
        attempt=1,
        max_attempts=task.max_attempts,
        priority=task.priority,
    )
    bell = Doorbell(
        str(retry.id),
        str(retry.tenant_id),
        retry.queue,
        task_name=task.name,
        traceparent=retry.traceparent,
    )
    ring_after_commit([bell])
    return retry
