"""Execution rows at chosen times, written straight to the table (history, not live runs)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from dags.models import Dag, DagRun
from dags.services.definitions import current_version
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


def make_dag_runs(
    dag: Dag,
    times: list[datetime],
    *,
    status: str = "success",
    duration: float = 2.0,
    lag: float = 0.5,
) -> list[DagRun]:
    """Ended runs of `dag` (manual triggers: several may share a fire time)."""
    version = current_version(dag)
    rows = [
        DagRun(
            tenant_id=dag.tenant_id,
            dag=dag,
            version=version,
            status=status,
            scheduled_at=when,
            started_at=when + timedelta(seconds=lag),
            completed_at=when + timedelta(seconds=lag + duration),
            created_at=when,
        )
        for when in times
    ]
    return DagRun.objects.bulk_create(rows)
