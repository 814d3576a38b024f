"""The whole run lifecycle with real processes: fire, claim, execute, retry, dead-letter."""

from __future__ import annotations

import itertools
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_app.models import TaskExecution
from scheduler_app.redis_client import redis_key
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import FAST_WORKER, dump_logs
from tests.processes import host_pids_running, start_worker, unique_sleep_seconds, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _executions(task):
    return list(TaskExecution.platform.filter(task=task).order_by("attempt", "scheduled_at"))


def test_an_interval_task_fires_repeatedly_and_succeeds(tenant, live_worker, beats):
    task = make_task(
        tenant,
        name="every-second",
        schedule={"type": "interval", "expression": "1s"},
        handler={"type": "python", "callable": "echo"},
        parameters={"hello": "world"},
    )
    beat = beats("solo")
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(task=task, status="success").count() >= 3,
            timeout=30,
            message="three successful fires",
        )
    except AssertionError:
        print(dump_logs(beat, live_worker))
        raise
    done = TaskExecution.platform.filter(task=task, status="success").order_by("scheduled_at")
    first = done.first()
    assert first.result == {"hello": "world"}
    assert first.trigger == "schedule" and first.worker_id
    assert first.started_at >= first.scheduled_at
    times = list(
        TaskExecution.platform.filter(task=task)
        .order_by("scheduled_at")
        .values_list("scheduled_at", flat=True)
    )
    gaps = [(b - a) for a, b in itertools.pairwise(times)]
    assert all(gap == timedelta(seconds=1) for gap in gaps), gaps
    task.refresh_from_db()
    assert task.next_fire_at > times[-1] and task.last_fired_at is not None


@pytest.fixture
def retries_spent_by_earlier_tests(redis_client):
    """What earlier tests of a whole-suite run leave: this minute's (and the next one's) retry
    budget spent past the production floor (10), under the Redis prefix that the session's
    processes share. Given back afterwards."""
    minute = int(time.time() // 60)
    keys = [redis_key(f"budget:retries:{spent}") for spent in (minute, minute + 1)]
    for key in keys:
        redis_client.incrby(key, 50)
        redis_client.expire(key, 300)
    yield
    for key in keys:
        redis_client.decrby(key, 50)


def test_a_failing_task_is_retried_with_its_backoff_then_dead_lettered(
    tenant, live_worker, beats, retries_spent_by_earlier_tests
):
    # The started worker judges this run's retries by the tests' budget floor, as this
    # process does, and does not defer them to a later minute (the whole-suite flake: the
    # first attempt failed at once and no retry came within the 40 s below).
    task = make_task(
        tenant,
        name="always-fails",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "fail"},
        retry_policy={"max_attempts": 3, "backoff": "linear", "base_delay_seconds": 1},
    )
    beat = beats("solo")  # promotes the pending retries when they are due
    # Under load a beat can take seconds to boot; the gaps below measure promotion, not boot.
    beat.wait_for_log("is now the leader", timeout=30)
    task_trigger(task=task)
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(task=task, dead_lettered=True).exists(),
            timeout=40,
            message="the run to be dead-lettered",
        )
    except AssertionError:
        print(dump_logs(beat, live_worker))
        raise
    attempts = _executions(task)
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert [a.status for a in attempts] == ["failed", "failed", "failed"]
    assert [a.trigger for a in attempts] == ["manual", "retry", "retry"]
    assert [a.dead_lettered for a in attempts] == [False, False, True]
    assert all(a.error_class == "exception:RuntimeError" or a.error_class for a in attempts)
    # linear backoff with a 1 s base: attempt 2 waits >= 1 s, attempt 3 >= 2 s
    for previous, following, delay in (
        (attempts[0], attempts[1], 1),
        (attempts[1], attempts[2], 2),
    ):
        gap = (following.started_at - previous.completed_at).total_seconds()
        assert delay - 0.05 <= gap <= delay + 3, gap


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_shell_task_past_its_timeout_is_killed_with_its_whole_sandbox(tenant, live_worker):
    marker = unique_sleep_seconds()
    task = make_task(
        tenant,
        name="sleeper",
        schedule={"type": "manual"},
        timeout_seconds=2,
        retry_policy={"max_attempts": 1},
        handler={
            "type": "shell",
            # A child and a grandchild, both asleep, found by the test by their argument.
            "command": ["sh", "-c", f"sleep {marker} & sleep {marker}"],
        },
    )
    execution = task_trigger(task=task)
    wait_until(
        lambda: TaskExecution.platform.get(id=execution.id).status == "timed_out",
        timeout=30,
        message="the run to time out",
    )
    execution.refresh_from_db()
    assert execution.error_class == "timeout" and execution.dead_lettered
    wait_until(lambda: not host_pids_running(marker), timeout=10, message="the sandbox to die")


def test_the_same_execution_delivered_many_times_runs_once(tenant, tmp_path, private_broker):
    ledger = tmp_path / "ledger"
    task = make_task(
        tenant,
        name="ledgered",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", f"echo run >> {ledger}; sleep 0.5"]},
    )
    # The ledger is a file of this host, which a sandboxed task cannot write (by design): a
    # worker of its own runs this one unsandboxed. Delivery is the point here.
    worker = start_worker(
        name="ledger", env_overrides={**FAST_WORKER, "WORKER_SHELL_SANDBOX": "off"}
    )
    try:
        execution = task_trigger(task=task)
        bell = Doorbell(str(execution.id), str(tenant.id), execution.queue)
        ring([bell] * 5)  # duplicate deliveries, as a visibility timeout or republish makes
        wait_until(
            lambda: TaskExecution.platform.get(id=execution.id).status == "success",
            timeout=30,
            message="the run to succeed",
        )
        # Every delivery handled (the trigger's own and the five duplicates, on a broker
        # prefix of this test's), each under the run's id: one ran and succeeded, the others
        # were dropped by the claim and acknowledged as ignored, so that none of them can
        # tell Celery (Flower) a state of the run (workers.celery_outcome).
        handled = re.compile(
            rf"Task ledgered\[{execution.id}\] (succeeded in \S+: 'execution {execution.id}:"
            r" success'|ignored)"
        )
        outcomes = wait_until(
            lambda: len(found := handled.findall(worker.log())) >= 6 and found,
            timeout=30,
            message="the six deliveries to be handled",
        )
    finally:
        worker.stop()
    assert sorted(o.split(" ")[0] for o in outcomes) == ["ignored"] * 5 + ["succeeded"]
    assert Path(ledger).read_text().splitlines() == ["run"]
    assert TaskExecution.platform.filter(task=task).count() == 1
