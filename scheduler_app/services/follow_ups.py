"""The next attempt of an execution: a new row that follows it in its chain.

A leaf (models only), so that every path that creates one (the worker's retry in
`executions`, a manual retry, the DAG's `retry` policy) imports it without importing the
finish that calls into the DAG engine.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.models import TaskExecution


def execution_follow_up_create(
    *,
    previous: TaskExecution,
    status: str,
    scheduled_at: datetime,
    attempt: int,
    max_attempts: int,
    priority: int | None = None,
) -> TaskExecution:
    """A new attempt that follows `previous` (a retry, or a manual retry of a dead letter)."""
    return TaskExecution.objects.create(
        id=uuid.uuid4(),
        tenant_id=previous.tenant_id,
        task_id=previous.task_id,
        status=status,
        trigger=Trigger.RETRY,
        priority=previous.priority if priority is None else priority,
        queue=previous.queue,
        scheduled_at=scheduled_at,
        queued_at=scheduled_at if status == ExecutionStatus.QUEUED else None,
        attempt=attempt,
        max_attempts=max_attempts,
        root_execution_id=previous.root_execution_id or previous.id,
        retry_of_id=previous.id,
        parameters=previous.parameters,
        # Retries of a fire share its key: a retry after the fire already succeeded elsewhere
        # (its key in another run) is skipped like any run of that key.
        idempotency_key=previous.idempotency_key,
        # The next attempt continues its fire's trace: one trace shows every attempt.
        traceparent=previous.traceparent,
    )
