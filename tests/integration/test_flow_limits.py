"""Flow control with real processes: a concurrency key held across two workers and two beats,
and a slot freed when the lease of a SIGKILLed worker's run ends."""

from __future__ import annotations

import itertools
import os
import signal

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from project.settings.test_redis import claim_redis_db, release_redis_db
from scheduler_app.models import TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.processes import start_beat, start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# The key is the task's name (the sleep handler takes no other parameter than its seconds).
ONE_PER_TASK = [{"key": "{{ task }}", "max_running": 1}]


def sleeper(tenant, name: str, seconds: float):
    return make_task(
        tenant,
        name=name,
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": seconds},
        retry_policy={"max_attempts": 1},
        concurrency=ONE_PER_TASK,
    )


def test_two_workers_and_two_beats_never_run_two_of_a_key_at_once(
    tenant, shared_worker, live_worker, beats
):
    _, prefix = shared_worker
    second = start_worker(
        name="w-flow-2", concurrency=4, env_overrides={**FAST_WORKER, "BROKER_KEY_PREFIX": prefix}
    )
    first_beat, second_beat = beats("flow-a"), beats("flow-b")
    tasks = [sleeper(tenant, "customer-a", 0.5), sleeper(tenant, "customer-b", 0.5)]
    runs = [task_trigger(task=task) for _ in range(4) for task in tasks]
    try:
        wait_until(
            lambda: TaskExecution.objects.filter(task__in=tasks, status="success").count() == 8,
            timeout=90,
            message="all eight runs succeeded",
        )
    except AssertionError:
        print(dump_logs(first_beat, second_beat, live_worker, second))
        raise
    finally:
        second.stop()
    done = TaskExecution.objects.filter(id__in=[run.id for run in runs])
    assert {(run.status, run.attempt) for run in done} == {("success", 1)}
    for task in tasks:
        mine = sorted((run for run in done if run.task_id == task.id), key=lambda r: r.started_at)
        for earlier, later in itertools.pairwise(mine):
            assert earlier.completed_at <= later.started_at, f"two runs of {task.name} overlapped"
    assert len({run.worker_id for run in done}) == 2, "both workers ran some"


@pytest.fixture
def flow_broker():
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    owner = f"{settings.RUN_ID}:{settings.XDIST_WORKER}:flow-kill"
    url, number = claim_redis_db(base, owner=owner)
    yield url
    release_redis_db(base, number, owner=owner)


def pending_now(task, **parameters) -> TaskExecution:
    """A run the private beat promotes and rings to the private broker (its doorbell is not
    rung to the session's broker, where the shared worker would take it)."""
    with transaction.atomic():
        run = task_trigger(task=task, parameters=parameters)
        transaction.get_connection().run_on_commit.clear()
    TaskExecution.objects.filter(id=run.id).update(status="pending", queued_at=None)
    return run


def test_a_sigkilled_workers_slot_is_free_once_its_lease_ends(tenant, flow_broker):
    env = {
        "REDIS_URL": flow_broker,
        "CELERY_BROKER_URL": flow_broker,
        "CELERY_RESULT_BACKEND": flow_broker,
        "SCHEDULER_REDIS_PREFIX": f"flowkill:{settings.RUN_ID}:",
    }
    worker_env = {**FAST_WORKER, **env, "WORKER_LEASE_SECONDS": "3"}
    task = sleeper(tenant, "holder", 60)
    beat = start_beat(node_id="flow-kill", env_overrides={**FAST_BEAT, **env})
    doomed = start_worker(name="w-flow-doomed", concurrency=2, env_overrides=worker_env)
    survivor = None
    try:
        holder = pending_now(task)
        wait_until(
            lambda: TaskExecution.objects.get(id=holder.id).flow_holds is not None,
            timeout=60,
            message="the first run holds the key's slot",
        )
        waiter = pending_now(task, seconds=0.1)
        wait_until(
            lambda: (
                (TaskExecution.objects.get(id=waiter.id).waiting_for or {}).get("key") == "holder"
            ),
            timeout=60,
            message="the second run waits for the key",
        )
        doomed.kill(signal.SIGKILL)
        killed_at = timezone.now()
        survivor = start_worker(name="w-flow-survivor", concurrency=2, env_overrides=worker_env)
        wait_until(
            lambda: TaskExecution.objects.get(id=waiter.id).status == "success",
            timeout=60,
            message="the waiting run ran once the dead worker's lease ended",
        )
    except AssertionError:
        print(dump_logs(beat, doomed, *([survivor] if survivor else [])))
        raise
    finally:
        for process in (beat, doomed, survivor):
            if process is not None:
                process.stop(timeout=10)
    waiter = TaskExecution.objects.get(id=waiter.id)
    assert waiter.attempt == 1 and waiter.worker_id.startswith("w-flow-survivor")
    assert waiter.started_at >= killed_at
