"""Checkpoints carried across a lost worker, on real worker processes: a run checkpoints
after each step; its worker is SIGKILLed (the run is re-queued as the same attempt and
another worker resumes it from the last step saved) or SIGTERMed with a preempt grace (the
handler is told, checkpoints and stops; its run is handed back at once, the same attempt,
and resumes elsewhere)."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from scheduler_app.models import ExecutionLoss, RunCheckpoint, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.checkpoint_handlers import checkpoint_env
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import FLEET_BEAT, fleet_workers, hostname_of, terminate_main
from tests.processes import broker_key_prefix, start_beat, stop_all, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

STEPS = 10
STEP_SECONDS = 0.2


def _stepping_task(tenant, name: str):
    return make_task(
        tenant,
        name=name,
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "test.checkpointed_steps"},
        parameters={"steps": STEPS, "step_seconds": STEP_SECONDS},
        retry_policy={"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0},
        timeout_seconds=60,
    )


@pytest.fixture(scope="module")
def fleet(django_db_setup, django_db_blocker):
    """Three workers started side by side and a beat (which promotes a lost run's retry), on
    broker queues of their own, for both tests: each stops the worker its run landed on and
    another takes the run over (one start's wait for the module, not one per test). The
    preempt grace covers the whole drain deadline: handlers are told at once on SIGTERM, as
    on a spot instance's short notice."""
    with broker_key_prefix(f"ck-{uuid.uuid4().hex[:8]}:"):
        beat = start_beat(node_id="ck-beat", env_overrides=FLEET_BEAT)
        workers = fleet_workers(
            ["ck-a", "ck-b", "ck-c"],
            concurrency=1,
            WORKER_SHUTDOWN_DEADLINE_SECONDS="20",
            WORKER_PREEMPT_GRACE_SECONDS="20",
            **checkpoint_env(),
        )
        names = {worker.name: hostname_of(worker) for worker in workers}
        yield workers, names
        stop_all([*workers, beat])


def _holder(fleet, execution):
    workers, names = fleet
    execution.refresh_from_db()
    (holder,) = [w for w in workers if names[w.name] == execution.worker_id]
    return holder


def _checkpointed_step(chain_id) -> int:
    checkpoint = RunCheckpoint.platform.filter(chain_id=chain_id).first()
    return checkpoint.state["next"] if checkpoint else 0


def test_a_checkpoint_survives_a_sigkilled_worker(tenant, fleet):
    task = _stepping_task(tenant, "killed-mid-run")
    try:
        first = task_trigger(task=task)
        wait_until(lambda: _checkpointed_step(first.id) >= 2, timeout=30, message="two steps saved")
        doomed = _holder(fleet, first)
        doomed.kill(signal.SIGKILL)
        doomed.process.wait(timeout=10)
        saved = _checkpointed_step(first.id)
        wait_until(
            lambda: TaskExecution.platform.filter(task=task, status="success").exists(),
            timeout=60,
            message="the run to succeed on the rescue worker",
        )
    except AssertionError:
        print(dump_logs(*fleet[0]))
        raise
    # Re-queued, not retried: the same row and attempt, finished by another worker (the
    # worker's loss is the platform's, it spends none of the task's attempts).
    (run,) = TaskExecution.platform.filter(task=task)
    assert (run.id, run.attempt, run.status) == (first.id, 1, "success")
    assert run.worker_id not in ("", fleet[1][doomed.name])
    (loss,) = ExecutionLoss.platform.filter(execution_id=run.id)
    assert (loss.outcome, loss.attempt, loss.worker_id) == ("requeued", 1, fleet[1][doomed.name])
    resumed = run.result["resumed_from"]
    # Resumed where the killed claim was (a step it saved after our look, at most one more).
    assert resumed["attempt"] == 1 and saved <= resumed["next"] <= saved + 1, (saved, resumed)
    assert run.result["done"] == STEPS


def test_a_sigterm_drain_lets_the_handler_checkpoint_and_hands_its_run_back(tenant, fleet):
    task = _stepping_task(tenant, "preempted-mid-run")
    try:
        run = task_trigger(task=task)
        wait_until(lambda: _checkpointed_step(run.id) >= 2, timeout=30, message="two steps saved")
        draining = _holder(fleet, run)
        terminate_main(draining)
        signalled = time.monotonic()
        # The handler checkpoints within a poll of the preempt signal and stops; the worker,
        # having nothing left to run, exits long before its 20 s deadline.
        draining.process.wait(timeout=15)
        exited_after = time.monotonic() - signalled
        wait_until(
            lambda: TaskExecution.platform.filter(id=run.id, status="success").exists(),
            timeout=30,
            message="the handed-back run to finish on the other worker",
        )
    except AssertionError:
        print(dump_logs(*fleet[0]))
        raise
    assert exited_after < 10, exited_after  # not the deadline's release
    run.refresh_from_db()
    # Handed back, not retried: the same attempt, finished by another worker.
    assert run.attempt == 1 and run.worker_id != fleet[1][draining.name]
    assert TaskExecution.platform.filter(task=task).count() == 1  # the same attempt, no retry
    # What the preempted handler saved in its grace, after the SIGTERM, is where it resumed.
    resumed = run.result["resumed_from"]
    assert resumed["preempted"] is True and resumed["next"] >= 2, resumed
    assert run.result["done"] == STEPS
