"""Execution rows at chosen times, written straight to the table (history, not live runs)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from scheduler_app.models import TaskDefinition, TaskExecution


def make_runs(
    task: TaskDefinition,
    times: list[datetime],
    *,
    status: str = "success",
    duration: float = 2.0,
    lag: float = 0.5,
) -> list[TaskExecution]:
    rows = [
        TaskExecution(
            id=uuid.uuid4(),
            tenant_id=task.tenant_id,
            task=task,
            status=status,
            scheduled_at=when,
            queued_at=when,
            started_at=when + timedelta(seconds=lag),
            completed_at=when + timedelta(seconds=lag + duration),
            parameters={"n": index},
            result={"ok": True},
        )
        for index, when in enumerate(times)
    ]
    return TaskExecution.objects.bulk_create(rows)
