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
    follow_up = execution_follow_up_build(
        previous=previous,
        status=status,
        scheduled_at=scheduled_at,
        attempt=attempt,
        max_attempts=max_attempts,
        priority=priority,
    )
    follow_up.save(force_insert=True)
    return follow_up


def execution_follow_up_build(
    *,
    previous: TaskExecution,
    status: str,
    scheduled_at: datetime,
    attempt: int,
    max_attempts: int,
    priority: int | None = None,
    trigger: str = Trigger.RETRY,
    own_chain: bool = False,
) -> TaskExecution:
    """The row `execution_follow_up_create` inserts, not saved (a caller that inserts many
    at once with ON CONFLICT DO NOTHING: a backfill running recorded fires again).
    `own_chain`: the row starts a chain of its own (its retries count from it) instead of
    continuing `previous`'s."""
    follow_up_id = uuid.uuid4()
    return TaskExecution(
        id=follow_up_id,
        tenant_id=previous.tenant_id,
        task_id=previous.task_id,
        status=status,
        trigger=trigger,
        priority=previous.priority if priority is None else priority,
        queue=previous.queue,
        scheduled_at=scheduled_at,
        queued_at=scheduled_at if status == ExecutionStatus.QUEUED else None,
        attempt=attempt,
        max_attempts=max_attempts,
        root_execution_id=follow_up_id
        if own_chain
        else (previous.root_execution_id or previous.id),
        retry_of_id=previous.id,
        parameters=previous.parameters,
        # Retries of a fire share its key: a retry after the fire already succeeded elsewhere
        # (its key in another run) is skipped like any run of that key.
        idempotency_key=previous.idempotency_key,
        # A singleton's retry still holds its key: a trigger during the backoff joins it.
        singleton_key=previous.singleton_key,
        # The next attempt continues its fire's trace: one trace shows every attempt.
        traceparent=previous.traceparent,
    )
