"""Reads of tenant data. Every function takes the tenant: a view never builds its own queryset.

An id from another tenant is simply not found (404), never forbidden with data.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from scheduler_app.errors import NotFound
from scheduler_app.models import ExecutionLog, TaskDefinition, TaskExecution, Tenant


def _as_uuid(value: Any, *, what: str) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as error:
        raise NotFound(f"{what} not found") from error


def task_list(
    *, tenant: Tenant, filters: Mapping[str, str] | None = None
) -> QuerySet[TaskDefinition]:
    filters = filters or {}
    tasks = TaskDefinition.objects.filter(tenant=tenant, deleted_at__isnull=True)
    if filters.get("tag"):
        tasks = (
            tasks.filter(tags__contains=[filters["tag"]])
            if _json_contains()
            else tasks.filter(tags__icontains=f'"{filters["tag"]}"')
        )
    if filters.get("schedule_type"):
        tasks = tasks.filter(schedule_type=filters["schedule_type"])
    if filters.get("paused") in ("true", "false"):
        tasks = tasks.filter(paused=filters["paused"] == "true")
    if filters.get("search"):
        tasks = tasks.filter(name__icontains=filters["search"])
    return tasks.order_by("name")


def _json_contains() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def task_get(*, tenant: Tenant, task_id: Any) -> TaskDefinition:
    task = TaskDefinition.objects.filter(
        tenant=tenant, id=_as_uuid(task_id, what="task"), deleted_at__isnull=True
    ).first()
    if task is None:
        raise NotFound("task not found")
    return task


def execution_list_for_task(*, tenant: Tenant, task: TaskDefinition) -> QuerySet[TaskExecution]:
    return TaskExecution.objects.filter(tenant=tenant, task=task).order_by(
        "-scheduled_at", "-attempt"
    )


def execution_get(*, tenant: Tenant, execution_id: Any) -> TaskExecution:
    execution = (
        TaskExecution.objects.select_related("task")
        .filter(tenant=tenant, id=_as_uuid(execution_id, what="execution"))
        .first()
    )
    if execution is None:
        raise NotFound("execution not found")
    return execution


def execution_log_get(*, tenant: Tenant, execution: TaskExecution) -> ExecutionLog | None:
    return ExecutionLog.objects.filter(tenant=tenant, execution_id=execution.id).first()


def dead_letter_list(*, tenant: Tenant) -> QuerySet[TaskExecution]:
    return (
        TaskExecution.objects.select_related("task")
        .filter(tenant=tenant, dead_lettered=True)
        .order_by("-completed_at")
    )


def dead_letter_get(*, tenant: Tenant, execution_id: Any) -> TaskExecution:
    execution = (
        dead_letter_list(tenant=tenant)
        .filter(id=_as_uuid(execution_id, what="dead-lettered execution"))
        .first()
    )
    if execution is None:
        raise NotFound("dead-lettered execution not found")
    return execution
