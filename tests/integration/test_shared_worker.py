"""The suite's shared worker takes only the runs of tests that ask for it (`live_worker`): a
test that rings doorbells without it (one that plays the worker, or reads its runs' states)
keeps its runs, however many integration tests ran before it in the same process."""

from __future__ import annotations

import time

import pytest

from scheduler_app.doorbell import Doorbell
from scheduler_app.models import TaskExecution
from scheduler_app.services.ringing import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import broker_key_prefix, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_shared_worker_takes_only_runs_published_under_its_prefix(tenant, shared_worker):
    worker, prefix = shared_worker  # running, as after any earlier integration test
    task = make_task(tenant, name="not-for-the-shared-worker")
    outside = task_trigger(task=task)  # committed, and its doorbell rung (unprefixed)
    time.sleep(3)  # the shared worker starts a run within milliseconds when it can see it
    outside.refresh_from_db()
    assert outside.status == "queued", worker.log()[-2000:]

    with broker_key_prefix(prefix):  # what `live_worker` does for its test
        ring([Doorbell(str(outside.id), str(tenant.id), outside.queue)])
        inside = task_trigger(task=task)
        wait_until(
            lambda: (
                TaskExecution.objects.filter(
                    id__in=[outside.id, inside.id], status="success"
                ).count()
                == 2
            ),
            timeout=30,
            message="both runs done by the shared worker once rung under its prefix",
        )
