"""Small builders for test data, always through the services (as production does)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from scheduler_app.fleet.registry import STATE_ACTIVE, WorkerRecord
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.services.task_definitions import task_create


def task_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "UTC"},
        "handler": {"type": "python", "callable": "noop"},
    }
    spec.update(overrides)
    return spec


def make_task(tenant: Tenant, **overrides: Any) -> TaskDefinition:
    return task_create(tenant=tenant, spec=task_spec(**overrides))


def make_queued_runs(
    task: TaskDefinition,
    count: int,
    *,
    queue: str,
    due: datetime,
    trigger: str = "manual",
    parameters: dict | None = None,
) -> list[TaskExecution]:
    """Queued runs of `task`, as the beat leaves them but with no doorbell: `count` of them,
    due at `due` plus a microsecond each ((task, time, attempt) is unique), on `queue`. A
    test that plays the worker gives them a queue of its own, where no live worker reads."""
    runs, queued_at = [], timezone.now()
    for index in range(count):
        run_id = uuid.uuid4()
        runs.append(
            TaskExecution(
                id=run_id,
                tenant_id=task.tenant_id,
                task=task,
                status="queued",
                trigger=trigger,
                priority=task.priority,
                queue=queue,
                scheduled_at=due + timedelta(microseconds=index),
                queued_at=queued_at,
                attempt=1,
                max_attempts=task.max_attempts,
                root_execution_id=run_id,
                parameters=parameters,
            )
        )
    TaskExecution.objects.bulk_create(runs)
    return runs


def make_worker_record(
    hostname: str,
    *,
    concurrency: int = 4,
    state: str = STATE_ACTIVE,
    silent_for: float = 0.0,
    **fields: Any,
) -> WorkerRecord:
    """A fleet registry entry whose last heartbeat was `silent_for` seconds ago."""
    now = time.time()
    return WorkerRecord(
        **{
            "hostname": hostname,
            "queues": ["normal"],
            "concurrency": concurrency,
            "version": "test",
            "pid": 1,
            "started_at": now - 100,
            "heartbeat_seconds": 1.0,
            "last_heartbeat": now - silent_for,
            "state": state,
            **fields,
        }
    )
