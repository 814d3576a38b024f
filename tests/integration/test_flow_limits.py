"""Flow control with real processes: a concurrency key held across two workers and two beats,
and a slot freed when the lease of a SIGKILLed worker's run ends."""

from __future__ import annotations

import itertools
import signal
import uuid

import pytest
from django.utils import timezone

from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.processes import broker_key_prefix, start_beat, start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# The key is the task's name (the sleep handler takes no other parameter than its seconds).
ONE_PER_TASK = [{"key": "{{ task }}", "max_running": 1}]
# Long enough to be still running when it is killed, short enough to run again in full.
HOLDER_SECONDS = 12


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
            lambda: TaskExecution.platform.filter(task__in=tasks, status="success").count() == 8,
            timeout=90,
            message="all eight runs succeeded",
        )
    except AssertionError:
        print(dump_logs(first_beat, second_beat, live_worker, second))
        raise
    finally:
        second.stop()
    done = TaskExecution.platform.filter(id__in=[run.id for run in runs])
    assert {(run.status, run.attempt) for run in done} == {("success", 1)}
    for task in tasks:
        mine = sorted((run for run in done if run.task_id == task.id), key=lambda r: r.started_at)
        for earlier, later in itertools.pairwise(mine):
            assert earlier.completed_at <= later.started_at, f"two runs of {task.name} overlapped"
    assert len({run.worker_id for run in done}) == 2, "both workers ran some"


def test_a_sigkilled_workers_slot_is_free_once_its_lease_ends(tenant):
    """The workers and the beat of this test read broker queues under a prefix of their own,
    so the session's shared worker never takes these runs: the only workers are the one we
    kill and the one started after it.

    Once the holder's lease ends its slot is no longer the dead worker's: the reaper re-queues
    the holder as the same attempt and keeps the slot for it (due order: it is older than the
    waiter), so the holder runs again first, to its end, and then the waiter, never both at
    once and neither twice. The survivor starts once the holder is re-queued, with the
    waiter's doorbell already ahead of the holder's in the queue and two pool processes that
    claim both together: without the kept slot, the waiter would take it."""
    worker_env = {**FAST_WORKER, "WORKER_LEASE_SECONDS": "3"}
    task = sleeper(tenant, "holder", HOLDER_SECONDS)
    with broker_key_prefix(f"flow-kill-{uuid.uuid4().hex[:8]}:"):
        beat = start_beat(node_id="flow-kill", env_overrides=FAST_BEAT)
        doomed = start_worker(name="w-flow-doomed", concurrency=2, env_overrides=worker_env)
        survivor = None
        try:
            holder = task_trigger(task=task)
            wait_until(
                lambda: TaskExecution.platform.get(id=holder.id).flow_holds is not None,
                timeout=60,
                message="the first run holds the key's slot",
            )
            waiter = task_trigger(task=task, parameters={"seconds": 0.1})
            wait_until(
                lambda: (
                    (TaskExecution.platform.get(id=waiter.id).waiting_for or {}).get("key")
                    == "holder"
                ),
                timeout=60,
                message="the second run waits for the key",
            )
            doomed.kill(signal.SIGKILL)
            killed_at = timezone.now()
            assert TaskExecution.platform.get(id=holder.id).status == "running", (
                f"the holder ended before the kill: raise HOLDER_SECONDS ({HOLDER_SECONDS})"
            )
            wait_until(
                lambda: ExecutionLoss.platform.filter(execution_id=holder.id).exists(),
                timeout=60,
                message="the holder was re-queued once its lease ended",
            )
            survivor = start_worker(name="w-flow-survivor", concurrency=2, env_overrides=worker_env)
            wait_until(
                lambda: TaskExecution.platform.filter(task=task, status="success").count() == 2,
                timeout=60 + HOLDER_SECONDS,
                message="the holder and the waiting run both ran to their end",
            )
        except AssertionError:
            print(dump_logs(beat, doomed, *([survivor] if survivor else [])))
            raise
        finally:
            for process in (beat, doomed, survivor):
                if process is not None:
                    process.stop(timeout=10)
    holder, waiter = (TaskExecution.platform.get(id=run.id) for run in (holder, waiter))
    # None doubled: one row each (no second attempt), each run once on the survivor.
    assert TaskExecution.platform.filter(task=task).count() == 2
    assert (holder.attempt, waiter.attempt) == (1, 1)
    assert holder.worker_id.startswith("w-flow-survivor")
    assert waiter.worker_id.startswith("w-flow-survivor")
    losses = ExecutionLoss.platform.filter(execution_id=holder.id)
    assert [(loss.outcome, loss.worker_id.startswith("w-flow-doomed")) for loss in losses] == [
        ("requeued", True)
    ]
    assert holder.started_at >= killed_at and waiter.started_at >= killed_at
    # The holder first (due order), and never both at once.
    assert holder.completed_at <= waiter.started_at, (
        f"holder ran {holder.started_at}..{holder.completed_at}, "
        f"the waiter started {waiter.started_at}"
    )
