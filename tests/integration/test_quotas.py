"""Quotas are enforced when a worker claims a run: over quota defers (pending), never fails."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from scheduler_app.models import AuditEntry, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrency_quota_defers_and_every_run_still_succeeds(tenant, live_worker, beats):
    tenant.max_concurrent_runs = 1
    tenant.save(update_fields=["max_concurrent_runs"])
    task = make_task(
        tenant,
        name="slow",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 1.5},
    )
    beat = beats("quota")  # the leader promotes deferred runs when their time comes
    runs = [task_trigger(task=task) for _ in range(3)]
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(task=task, status="success").count() == 3,
            timeout=60,
            message="all three runs succeeded",
        )
    except AssertionError:
        print(dump_logs(beat, live_worker))
        raise
    done = list(
        TaskExecution.platform.filter(id__in=[run.id for run in runs]).order_by("started_at")
    )
    assert all(run.status == "success" and run.attempt == 1 for run in done), [
        (run.status, run.attempt, run.error_message) for run in done
    ]
    for earlier, later in itertools.pairwise(done):
        assert earlier.completed_at <= later.started_at, "two runs overlapped despite the quota"
    note = AuditEntry.platform.get(tenant=tenant, action="quota.exceeded")
    assert note.detail["quota"] == "max_concurrent_runs" and note.actor == "system"


def test_hourly_quota_defers_the_extra_run_to_the_next_hour(tenant, live_worker, api):
    tenant.max_runs_per_hour = 2
    tenant.save(update_fields=["max_runs_per_hour"])
    task = make_task(tenant, name="quick", schedule={"type": "manual"})
    first, _second = task_trigger(task=task), task_trigger(task=task)
    wait_until(
        lambda: TaskExecution.platform.filter(task=task, status="success").count() == 2,
        timeout=30,
        message="two runs succeeded",
    )
    third = task_trigger(task=task)
    wait_until(
        lambda: TaskExecution.platform.get(id=third.id).status == "pending",
        timeout=30,
        message="the third run was deferred",
    )
    third.refresh_from_db()
    assert third.scheduled_at.minute == 0 and third.scheduled_at.second == 0
    assert timedelta(0) < third.scheduled_at - first.scheduled_at <= timedelta(hours=1)
    usage = api.get("/api/v1/tenant/usage").json()
    assert usage["usage"]["runs_this_hour"] == 2
    assert usage["quota"]["max_runs_per_hour"] == 2
