"""Checkpoints carried across a lost worker, on real worker processes: a run checkpoints
after each step; its worker is SIGKILLed (the next attempt, on another worker, resumes from
the last step saved) or SIGTERMed with a preempt grace (the handler is told, checkpoints and
stops; its run is handed back at once, the same attempt, and resumes elsewhere)."""

from __future__ import annotations

import signal
import time

import pytest

from scheduler_app.models import RunCheckpoint, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.checkpoint_handlers import checkpoint_env
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import FLEET_BEAT, fleet_workers, hostname_of, terminate_main
from tests.processes import start_beat, stop_all, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
    pytest.mark.timeout(120),
]

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


def _two_workers(prefix: str, **env: str):
    """Two workers started side by side (one start's wait, not two): the run lands on one,
    the test stops that one, and the other takes the run over."""
    return fleet_workers([f"{prefix}-a", f"{prefix}-b"], concurrency=1, **checkpoint_env(), **env)


def _holder_and_other(workers, execution):
    execution.refresh_from_db()
    (holder,) = [w for w in workers if hostname_of(w) == execution.worker_id]
    (other,) = [w for w in workers if w is not holder]
    return holder, other


def _checkpointed_step(chain_id) -> int:
    checkpoint = RunCheckpoint.objects.filter(chain_id=chain_id).first()
    return checkpoint.state["next"] if checkpoint else 0


def test_a_checkpoint_survives_a_sigkilled_worker(tenant):
    task = _stepping_task(tenant, "killed-mid-run")
    beat = start_beat(node_id="ck-kill", env_overrides=FLEET_BEAT)  # promotes the retry
    workers = _two_workers("ck-kill")
    try:
        first = task_trigger(task=task)
        wait_until(lambda: _checkpointed_step(first.id) >= 2, timeout=30, message="two steps saved")
        doomed, _rescue = _holder_and_other(workers, first)
        doomed.kill(signal.SIGKILL)
        doomed.process.wait(timeout=10)
        saved = _checkpointed_step(first.id)
        wait_until(
            lambda: TaskExecution.objects.filter(task=task, status="success").exists(),
            timeout=60,
            message="the run to succeed on the rescue worker",
        )
    except AssertionError:
        print(dump_logs(beat, *workers))
        raise
    finally:
        stop_all([*workers, beat])
    attempts = list(TaskExecution.objects.filter(task=task).order_by("attempt"))
    assert [(e.attempt, e.status, e.error_class) for e in attempts] == [
        (1, "failed", "worker_lost"),
        (2, "success", ""),
    ]
    resumed = attempts[1].result["resumed_from"]
    # Resumed where the killed attempt was (a step it saved after our look, at most one more).
    assert resumed["attempt"] == 1 and saved <= resumed["next"] <= saved + 1, (saved, resumed)
    assert attempts[1].result["done"] == STEPS


def test_a_sigterm_drain_lets_the_handler_checkpoint_and_hands_its_run_back(tenant):
    task = _stepping_task(tenant, "preempted-mid-run")
    # The grace covers the whole deadline: the handlers are told at once (spot preemption).
    workers = _two_workers(
        "ck-drain", WORKER_SHUTDOWN_DEADLINE_SECONDS="20", WORKER_PREEMPT_GRACE_SECONDS="20"
    )
    try:
        run = task_trigger(task=task)
        wait_until(lambda: _checkpointed_step(run.id) >= 2, timeout=30, message="two steps saved")
        draining, other = _holder_and_other(workers, run)
        other_name = hostname_of(other)
        terminate_main(draining)
        signalled = time.monotonic()
        # The handler checkpoints within a poll of the preempt signal and stops; the worker,
        # having nothing left to run, exits long before its 20 s deadline.
        draining.process.wait(timeout=15)
        exited_after = time.monotonic() - signalled
        wait_until(
            lambda: TaskExecution.objects.filter(id=run.id, status="success").exists(),
            timeout=30,
            message="the handed-back run to finish on the other worker",
        )
    except AssertionError:
        print(dump_logs(*workers))
        raise
    finally:
        stop_all(workers)
    assert exited_after < 10, exited_after  # not the deadline's release
    run.refresh_from_db()
    assert run.worker_id == other_name and run.attempt == 1  # handed back, not retried
    assert TaskExecution.objects.filter(task=task).count() == 1  # the same attempt, no retry
    # What the preempted handler saved in its grace, after the SIGTERM, is where it resumed.
    resumed = run.result["resumed_from"]
    assert resumed["preempted"] is True and resumed["next"] >= 2, resumed
    assert run.result["done"] == STEPS
