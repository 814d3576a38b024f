"""Missed schedules: computed from the schedule and the executions table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.monitoring.missed import missed_fires
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


def _fire(task, minute: int, *, lag: float | None):
    scheduled = datetime(2026, 3, 1, 11, minute, tzinfo=UTC)
    TaskExecution.objects.create(
        tenant_id=task.tenant_id,
        task=task,
        status=ExecutionStatus.SUCCESS if lag is not None else ExecutionStatus.QUEUED,
        scheduled_at=scheduled,
        started_at=None if lag is None else scheduled + timedelta(seconds=lag),
    )


def test_fires_without_execution_late_or_unstarted_are_missed(tenant):
    task = make_task(
        tenant, name="every-minute", schedule={"type": "cron", "expression": "* * * * *"}
    )
    TaskDefinition.platform.filter(id=task.id).update(
        created_at=datetime(2026, 3, 1, 11, 50, 10, tzinfo=UTC)
    )
    # Expected: 11:51 .. 11:59 (12:00 is inside the 60 s grace, not judged yet).
    for minute in (51, 52, 53, 55, 56, 57, 58):
        _fire(task, minute, lag=0.5)
    _fire(task, 59, lag=None)  # queued, never started
    TaskExecution.platform.filter(task=task, scheduled_at__minute=58).update(
        started_at=datetime(2026, 3, 1, 11, 59, 30, tzinfo=UTC)
    )  # 90 s late
    [misses] = missed_fires(tenant=tenant, window=timedelta(hours=1), grace_seconds=60, now=NOW)
    assert misses.expected == 9
    assert [(m.scheduled_at.minute, m.reason) for m in misses.missed] == [
        (54, "no execution"),
        (58, "started late"),
        (59, "not started"),
    ]


def test_paused_and_other_tenants_tasks_are_not_listed(tenant, tenant_factory):
    paused = make_task(tenant, name="paused", schedule={"type": "cron", "expression": "* * * * *"})
    TaskDefinition.platform.filter(id=paused.id).update(
        paused=True, created_at=datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    )
    other, _ = tenant_factory("globex")
    theirs = make_task(other, name="theirs", schedule={"type": "cron", "expression": "* * * * *"})
    TaskDefinition.platform.filter(id=theirs.id).update(
        created_at=datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    )
    assert missed_fires(tenant=tenant, window=timedelta(hours=1), grace_seconds=60, now=NOW) == []
    assert (
        len(missed_fires(tenant=other, window=timedelta(hours=1), grace_seconds=60, now=NOW)) == 1
    )
