from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution
from tests.factories import make_task


@pytest.fixture
def signed_in(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


def add_execution(
    task,
    *,
    minutes_ago: float,
    status: str,
    lag: float = 0.2,
    duration: float = 1.0,
    error_class: str = "",
    attempt: int = 1,
    root=None,
    dead_lettered=False,
):
    """A finished (or running) execution row as the services would leave it."""
    scheduled = timezone.now() - timedelta(minutes=minutes_ago)
    started = scheduled + timedelta(seconds=lag) if status != ExecutionStatus.QUEUED else None
    finished = status not in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)
    execution = TaskExecution.objects.create(
        tenant_id=task.tenant_id,
        task=task,
        status=status,
        scheduled_at=scheduled,
        queued_at=scheduled,
        started_at=started,
        completed_at=started + timedelta(seconds=duration) if finished and started else None,
        attempt=attempt,
        max_attempts=3,
        root_execution_id=root,
        worker_id="celery@w1" if started else "",
        error_class=error_class,
        error_message=f"boom ({error_class})" if error_class else "",
        result={"ok": True} if status == ExecutionStatus.SUCCESS else None,
        dead_lettered=dead_lettered,
        dead_lettered_at=timezone.now() if dead_lettered else None,
    )
    if root is None:
        TaskExecution.objects.filter(id=execution.id).update(root_execution_id=execution.id)
        execution.root_execution_id = execution.id
    return execution


@pytest.fixture
def busy_task(tenant):
    """A minutely task with a history: successes, failures of two classes, a dead letter."""
    task = make_task(
        tenant,
        name="minutely-sync",
        schedule={"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
    )
    for i in range(6):
        add_execution(task, minutes_ago=30 - i, status=ExecutionStatus.SUCCESS, lag=0.1 * i)
    first = add_execution(
        task, minutes_ago=20, status=ExecutionStatus.FAILED, error_class="timeout"
    )
    add_execution(
        task,
        minutes_ago=19.5,
        status=ExecutionStatus.FAILED,
        error_class="http_5xx",
        attempt=2,
        root=first.id,
    )
    add_execution(
        task,
        minutes_ago=19,
        status=ExecutionStatus.FAILED,
        error_class="http_5xx",
        attempt=3,
        root=first.id,
        dead_lettered=True,
    )
    return task
