"""A debounce window survives a restart: the beat leader is stopped in the middle of the
window and a new one started; the collapsed run still starts once, with the last trigger's
parameters (real beat, real worker; the window is a pending row, not a timer)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.task_definitions import task_trigger_outcome
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW_SECONDS = 3


def test_a_restart_mid_window_loses_nothing(tenant, live_worker, beats):
    task = make_task(
        tenant,
        name="collapse",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "echo"},
        debounce={"key": "{{parameters.index}}", "seconds": WINDOW_SECONDS},
    )
    first = beats("debounce-a")
    first.wait_for_log("is now the leader", timeout=30)
    opened = timezone.now()
    for version in (1, 2, 3):
        task_trigger_outcome(task=task, parameters={"index": "books", "version": version})
    first.stop(timeout=10)  # mid-window: the run is due WINDOW_SECONDS after the last trigger
    (pending,) = TaskExecution.platform.filter(task=task)
    assert pending.status == "pending" and timezone.now() < pending.scheduled_at
    second = beats("debounce-b")
    try:
        wait_until(
            lambda: TaskExecution.platform.get(id=pending.id).status == "success",
            timeout=60,
            message="the collapsed run to succeed after the restart",
        )
    except AssertionError:
        print(dump_logs(second, live_worker))
        raise
    (ran,) = TaskExecution.platform.filter(task=task)
    assert ran.id == pending.id and ran.trigger_count == 3
    assert ran.parameters == {"index": "books", "version": 3}
    assert ran.result == {"index": "books", "version": 3}  # what the handler was given
    assert ran.started_at >= opened + timedelta(seconds=WINDOW_SECONDS)
