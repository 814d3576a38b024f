"""Chaos with real workers and real signals: SIGKILL mid-load, SIGTERM drain and a rolling
restart under load. A ledger file written by the task itself proves each attempt ran once."""

from __future__ import annotations

import collections
import time
import uuid

import pytest
from django.utils import timezone

from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import (
    FLEET_BEAT,
    all_terminal,
    finals,
    fleet_worker,
    fleet_workers,
    hostname_of,
    terminate_main,
)
from tests.processes import start_beat, stop_all, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
]


# The ledger is a file of this host, which a sandboxed shell task cannot write (by design):
# these workers run shell tasks unsandboxed. Delivery is the point here, not the sandbox.
LEDGER_WORKER = {"WORKER_SHELL_SANDBOX": "off"}


def _ledger_task(tenant, ledger, *, name: str, seconds: float):
    script = f'echo "$TASK_EXECUTION_ID $TASK_ATTEMPT" >> {ledger}; sleep {seconds}'
    return make_task(
        tenant,
        name=name,
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", script]},
        retry_policy={"max_attempts": 5, "backoff": "fixed", "base_delay_seconds": 0},
        timeout_seconds=60,
    )


def _ledger(path) -> collections.Counter:
    lines = path.read_text().splitlines() if path.exists() else []
    return collections.Counter(line.split()[0] for line in lines)


def test_sigkill_of_a_worker_in_the_middle_of_200_runs_loses_nothing_and_runs_nothing_twice(
    tenant, tmp_path
):
    ledger = tmp_path / "ledger.txt"
    task = _ledger_task(tenant, ledger, name="ledgered", seconds=0.2)
    beat = start_beat(node_id="chaos", env_overrides={**FLEET_BEAT, "SCHEDULER_REQUEUE_GRACE": "8"})
    victim, survivor = fleet_workers(["victim", "survivor"], concurrency=4, **LEDGER_WORKER)
    victim_name = hostname_of(victim)
    try:
        for _ in range(200):
            task_trigger(task=task)
        wait_until(
            lambda: (
                TaskExecution.platform.filter(
                    task=task, worker_id=victim_name, status="running"
                ).count()
                >= 2
                and TaskExecution.platform.filter(task=task, status="success").count() >= 20
            ),
            timeout=60,
            message="the victim to be busy mid-load",
        )
        victim.kill()  # SIGKILL to the whole process group: main and pool processes
        killed_at = timezone.now()
        wait_until(
            lambda: (
                all_terminal(TaskExecution.platform.filter(task=task))
                and len(finals(task)) == 200
                and all(e.status == "success" for e in finals(task).values())
            ),
            timeout=180,
            interval=0.5,
            message="every run to end in success",
        )
    except AssertionError:
        print(dump_logs(victim, survivor, beat))
        raise
    finally:
        stop_all([survivor, beat, victim])

    executions = list(TaskExecution.platform.filter(task=task))
    losses = list(ExecutionLoss.platform.filter(execution_id__in=[e.id for e in executions]))
    assert losses, "the kill should have caught runs in flight"
    assert all(loss.worker_id == victim_name for loss in losses), [
        (loss.worker_id, loss.reason) for loss in losses if loss.worker_id != victim_name
    ]
    # Each lost run went back to the queue once, as the same attempt: no retry was spent.
    lost = collections.Counter(loss.execution_id for loss in losses)
    assert [loss.outcome for loss in losses] == ["requeued"] * len(losses)
    assert max(lost.values()) == 1
    assert len(executions) == 200 and {e.attempt for e in executions} == {1}
    # The ledger: a run that was not lost started once; a lost one once more under its new
    # claim (or only then, when the kill came before its script's first line).
    counts = _ledger(ledger)
    assert all(counts[str(e.id)] == 1 for e in executions if e.id not in lost), [
        k for k, v in counts.items() if v > 1 and uuid.UUID(k) not in lost
    ]
    assert all(1 <= counts[str(e.id)] <= 2 for e in executions if e.id in lost)
    recovery = min(e.started_at for e in executions if e.id in lost) - killed_at
    detected = max(loss.lost_at for loss in losses) - killed_at
    print(
        f"SIGKILL recovery: {len(lost)} runs lost; re-queued "
        f"{detected.total_seconds():.2f}s after the kill; first re-run started "
        f"{recovery.total_seconds():.2f}s after the kill (behind the queued backlog)"
    )


def test_sigterm_drains_running_work_and_releases_what_outlives_the_deadline(tenant, tmp_path):
    marker_dir = tmp_path
    # First run of an execution sleeps long; a re-run of the same execution ends at once.
    script = (
        f'm={marker_dir}/$TASK_EXECUTION_ID; if [ -e "$m" ]; then echo again; '
        f'else touch "$m"; sleep "$1"; fi'
    )
    quick = make_task(
        tenant,
        name="quick",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", script, "sh", "1"]},
    )
    slow = make_task(
        tenant,
        name="slow",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", script, "sh", "60"]},
    )
    # The marker files live on this host: unsandboxed workers (see LEDGER_WORKER).
    draining = fleet_worker(
        "drain", concurrency=2, WORKER_SHUTDOWN_DEADLINE_SECONDS="3", **LEDGER_WORKER
    )
    drain_name = hostname_of(draining)
    other = None
    try:
        quick_run = task_trigger(task=quick)
        slow_run = task_trigger(task=slow)
        wait_until(
            lambda: (
                TaskExecution.platform.filter(
                    id__in=[quick_run.id, slow_run.id], status="running"
                ).count()
                == 2
            ),
            timeout=30,
            message="both runs to start",
        )
        terminate_main(draining)
        signalled = time.monotonic()
        other = fleet_worker("other", concurrency=2, **LEDGER_WORKER)
        wait_until(
            lambda: TaskExecution.platform.filter(id=quick_run.id, status="success").exists(),
            timeout=20,
            message="the quick run to finish on the draining worker",
        )
        wait_until(
            lambda: TaskExecution.platform.filter(id=slow_run.id, status="success").exists(),
            timeout=40,
            message="the released slow run to finish elsewhere",
        )
        released_after = time.monotonic() - signalled
        draining.process.wait(timeout=30)
    except AssertionError:
        print(dump_logs(draining, *(p for p in [other] if p)))
        raise
    finally:
        draining.stop()
        if other:
            other.stop()
    quick_run.refresh_from_db()
    slow_run.refresh_from_db()
    assert quick_run.worker_id == drain_name
    assert slow_run.worker_id == hostname_of_record(other) and slow_run.attempt == 1
    assert TaskExecution.platform.filter(task__in=[quick, slow]).count() == 2  # no failures
    assert released_after < 3 + 15, released_after  # deadline + re-run, not a lease expiry
    from scheduler_app.fleet.registry import worker_record_get

    assert worker_record_get(drain_name).state == "gone"
    print(f"SIGTERM drain: slow run released and finished elsewhere {released_after:.1f}s later")


def hostname_of_record(worker) -> str:
    from scheduler_app.fleet.registry import worker_records

    return next(r.hostname for r in worker_records() if r.pid == worker.pid)


def test_a_rolling_restart_of_every_worker_under_load_loses_nothing(tenant, tmp_path):
    ledger = tmp_path / "ledger.txt"
    task = _ledger_task(tenant, ledger, name="rolling", seconds=0.3)
    beat = start_beat(node_id="roll", env_overrides={**FLEET_BEAT, "SCHEDULER_REQUEUE_GRACE": "8"})
    env = {"WORKER_SHUTDOWN_DEADLINE_SECONDS": "2", **LEDGER_WORKER}
    workers = fleet_workers([f"roll-a{i}" for i in range(2)], concurrency=3, **env)
    started = list(workers)
    try:
        for _ in range(80):
            task_trigger(task=task)
        for generation in range(2):
            for index in range(len(workers)):
                # One worker at a time, as a rolling update replaces pods: the old one is told
                # to stop and drains while its replacement boots, and the next goes once both
                # are done.
                old = workers[index]
                terminate_main(old)
                workers[index] = fleet_worker(f"roll-b{generation}{index}", concurrency=3, **env)
                started.append(workers[index])
                old.process.wait(timeout=60)
        wait_until(
            lambda: (
                all_terminal(TaskExecution.platform.filter(task=task)) and len(finals(task)) == 80
            ),
            timeout=180,
            interval=0.5,
            message="every run to end",
        )
    except AssertionError:
        print(dump_logs(beat, *started))
        raise
    finally:
        stop_all([*started, beat])
    runs = finals(task)
    assert all(e.status == "success" for e in runs.values())
    assert not TaskExecution.platform.filter(task=task).exclude(status="success").exists()
    counts = _ledger(ledger)
    # A run released at the deadline restarts as the same attempt: it may appear twice in
    # the ledger only if it was released; every other run appears once.
    released = sum(1 for v in counts.values() if v > 1)
    print(f"rolling restart: 80 runs, 4 worker restarts, {released} released at a deadline")
    assert released <= 12
