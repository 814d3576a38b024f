"""Fair dispatch: one tenant's 5,000 queued runs in a tier do not delay another tenant's single
run in that tier by more than 2 s (real worker, real beat leader, real Redis broker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.ringing.ring import ring
from scheduler_app.services.firing import Fire, fires_record
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOOD = 5000
MAX_DELAY_SECONDS = 2.0
# Sized to the test's fleet (one worker, 4 processes), as an operator sizes it to theirs.
CAP = 10


@override_settings(FAIR_INFLIGHT_PER_TENANT=CAP)
def test_a_flooding_tenant_does_not_delay_another_tenants_run(tenant_factory, live_worker, beats):
    noisy, _ = tenant_factory("noisy")
    quiet, _ = tenant_factory("quiet")
    # Each flood run takes 0.2 s: the worker is fully occupied by the flood, yet mostly idle
    # on the CPU, so this test does not starve the suites running beside it.
    flood_task = make_task(
        noisy,
        name="flood",
        schedule={"type": "manual"},
        priority=5,
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 0.2},
    )
    quiet_task = make_task(quiet, name="single", schedule={"type": "manual"}, priority=5)
    beat = beats("fair", FAIR_INFLIGHT_PER_TENANT=str(CAP))
    beat.wait_for_log("is now the leader", timeout=30)

    now = timezone.now()
    fires = [
        Fire(
            task_id=flood_task.id,
            tenant_id=noisy.id,
            scheduled_at=now - timedelta(milliseconds=FLOOD - index),
            priority=5,
            queue="normal",
            max_attempts=1,
        )
        for index in range(FLOOD)
    ]
    for start in range(0, FLOOD, 1000):
        ring(fires_record(fires[start : start + 1000], now=now))
    # Let the flood reach a steady state: the worker busy with it, the leader re-offering it.
    wait_until(
        lambda: TaskExecution.platform.filter(task=flood_task, status="success").count() >= 12,
        timeout=60,
        message="the flood is being worked on",
    )
    delays = []
    for _ in range(3):
        run = task_trigger(task=quiet_task)
        try:
            wait_until(
                lambda run=run: TaskExecution.platform.get(id=run.id).started_at is not None,
                timeout=60,
                message="the quiet tenant's run started",
            )
        except AssertionError:
            print(dump_logs(beat, live_worker))
            raise
        started = TaskExecution.platform.get(id=run.id)
        delays.append((started.started_at - started.scheduled_at).total_seconds())
        backlog = TaskExecution.platform.filter(
            task=flood_task, status__in=["pending", "queued"]
        ).count()
        assert backlog > 1000, "the flood drained first; the test proves nothing"
    print(f"quiet tenant's schedule-to-start delays behind a {FLOOD}-run flood: {delays}")
    assert max(delays) <= MAX_DELAY_SECONDS, delays
