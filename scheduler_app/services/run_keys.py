"""A keyed run's idempotency (§12), decided just before its handler would start.

The key is rendered once per fire (its first attempt) and recorded on the execution;
retries carry it (execution_follow_up_create). If an execution of the same task already
succeeded under that key, this run is not run: it ends `skipped`, naming that execution.

The check holds a transaction-scoped advisory lock on (task, key) while it reads and records
the key, so of two runs of one key that start at the same instant, one sees the other's key
recorded: while that one is `running` (past its lease too, until a reaper ends it) this
one waits (`running_elsewhere`, its own key not yet recorded), then settles again and is
skipped if the other succeeded, or runs if it did not.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction

from scheduler_app.choices import ExecutionStatus
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.run_key_templates import KeyTemplateError, key_render


@dataclass(frozen=True)
class RunKey:
    key: str
    succeeded_before: uuid.UUID | None = None  # the earlier success under the same key
    error: str = ""  # the key could not be rendered (a parameter it names is missing)
    running_elsewhere: uuid.UUID | None = None  # a run of the same key that is running now


NEVER = datetime.max.replace(tzinfo=UTC)


def _key_lock_id(task_id: uuid.UUID, key: str) -> int:
    digest = hashlib.sha256(f"{task_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _earliest_success_and_a_running_run(
    others: list[tuple[uuid.UUID, str, datetime | None]],
) -> tuple[uuid.UUID | None, uuid.UUID | None]:
    """Of the key's other runs (id, status, completed_at): the first to succeed, else one
    that is running."""
    succeeded = [
        (completed_at or NEVER, run_id)
        for run_id, status, completed_at in others
        if status == ExecutionStatus.SUCCESS
    ]
    if succeeded:
        return min(succeeded)[1], None
    running = [run_id for run_id, status, _ in others if status == ExecutionStatus.RUNNING]
    return None, min(running, default=None)


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
                budget=expression_budget(),
            )
        except KeyTemplateError as error:
            return RunKey(key="", error=f"idempotency_key: {error}")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_key_lock_id(task.id, key)])
        # One statement reads both the success and the running run of the key: a run of the
        # key may finish (running -> success, without this lock) between two statements, and
        # read apart, this run could see it neither as succeeded nor as running, and run.
        # A running run is waited for even past its lease: it may yet finish (a stalled
        # worker, a batch's success not yet recorded), and two successes of one key would
        # break the key's promise. The reapers end it if its worker is gone.
        others = (
            TaskExecution.platform.filter(
                task_id=task.id,
                idempotency_key=key,
                status__in=(ExecutionStatus.SUCCESS, ExecutionStatus.RUNNING),
            )
            .exclude(id=execution.id)
            .values_list("id", "status", "completed_at")
        )
        earlier, running = _earliest_success_and_a_running_run(list(others))
        mine = TaskExecution.platform.filter(
            id=execution.id,
            scheduled_at=execution.scheduled_at,
            claim_token=claim_token,
            status=ExecutionStatus.RUNNING,
        )
        if earlier is None and running is not None:
            # Not recorded while waiting (a retry's key, carried from creation, is taken off):
            # waiters are invisible to each other, so when the running one fails, the first
            # waiter through this lock runs and the rest wait for it.
            mine.update(idempotency_key="")
            return RunKey(key=key, running_elsewhere=running)
        mine.update(idempotency_key=key, skipped_for_execution_id=earlier)
    execution.idempotency_key, execution.skipped_for_execution_id = key, earlier
    return RunKey(key=key, succeeded_before=earlier)
