"""The suite's shared worker takes only the runs of tests that ask for it (`live_worker`): a
test that rings doorbells without it (one that plays the worker, or reads its runs' states)
keeps its runs, however many integration tests ran before it in the same process."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from django.conf import settings

from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import broker_key_prefix, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _doorbells_waiting(queue: str) -> str:
    """What the doorbells waiting in an unprefixed broker queue say (their bodies decoded)."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        messages = client.lrange(queue, 0, -1)
    finally:
        client.close()
    return " ".join(base64.b64decode(json.loads(message)["body"]).decode() for message in messages)


def test_the_shared_worker_takes_only_runs_published_under_its_prefix(tenant, shared_worker):
    worker, prefix = shared_worker  # running, as after any earlier integration test
    task = make_task(tenant, name="not-for-the-shared-worker")
    outside = task_trigger(task=task)  # committed, and its doorbell rung (unprefixed)
    with broker_key_prefix(prefix):  # what `live_worker` does for its test
        inside = task_trigger(task=task)  # rung after `outside`, where the worker reads
        wait_until(
            lambda: TaskExecution.platform.filter(id=inside.id, status="success").exists(),
            timeout=30,
            message="the run rung under its prefix to be done by the shared worker",
        )
    # The worker was taking doorbells meanwhile: the one rung before, outside its prefix,
    # is still in its queue, and its run still waits.
    outside.refresh_from_db()
    assert outside.status == "queued", worker.log()[-2000:]
    assert str(outside.id) in _doorbells_waiting(outside.queue)

    with broker_key_prefix(prefix):
        ring([Doorbell(str(outside.id), str(tenant.id), outside.queue)])
        wait_until(
            lambda: TaskExecution.platform.filter(id=outside.id, status="success").exists(),
            timeout=30,
            message="the first run done by the shared worker once rung under its prefix",
        )
