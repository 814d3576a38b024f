"""A batch rung ahead of its time, through a real worker and the real lease reaper: the
batch's process waits for the runs' time holding them, and their leases must cover that
wait. A lease counted from the claim ran out during it (the wait may be as long as the
claim's clock tolerance, 10 s, as long as the chaos suites' lease): the reaper handed runs
still held by a live process to another one, and both ran them (the nemesis saw it under
load: runs of a worker it never harmed executed two and three times)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

import tests.ledger  # noqa: F401 (registers the `ledger` handler in this process)
from runs.lost import expired_leases_reap
from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from tests.factories import make_queued_runs, make_task
from tests.integration.conftest import FAST_WORKER, dump_logs
from tests.ledger import ledger_counts, ledger_env
from tests.processes import broker_key_prefix, start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 3
LEASE_SECONDS = 2
AHEAD_SECONDS = 6  # inside the claim's clock tolerance (10 s), three leases long


def test_a_batch_claimed_ahead_of_its_time_keeps_its_runs_through_the_wait(tenant, tmp_path):
    prefix = f"ahead-{uuid.uuid4().hex[:10]}:"
    ledger = tmp_path / "ledger.txt"
    worker = start_worker(
        name="ahead",
        concurrency=2,  # a second process, free to take whatever the reaper hands out
        env_overrides={
            **FAST_WORKER,
            **ledger_env(),
            "BROKER_KEY_PREFIX": prefix,
            "WORKER_LEASE_SECONDS": str(LEASE_SECONDS),
        },
    )
    try:
        task = make_task(
            tenant,
            name="ahead",
            schedule={"type": "manual"},
            handler={"type": "python", "callable": "ledger"},
            parameters={"path": str(ledger), "seconds": 0.1},
            retry_policy={"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0},
        )
        due = timezone.now() + timedelta(seconds=AHEAD_SECONDS)
        runs = make_queued_runs(task, RUNS, queue="normal", due=due)
        ids = [run.id for run in runs]
        bells = [Doorbell(str(run.id), str(tenant.id), "normal") for run in runs]
        with broker_key_prefix(prefix):
            # One message for all of them: a batch, claimed at once, that waits for its time.
            assert ring(bells, sticky=False, batch=128, processes=1) == RUNS
            held = TaskExecution.platform.filter(id__in=ids, status="running")
            wait_until(lambda: held.count() == RUNS, timeout=30, message="the batch's claim")

            def ended() -> bool:
                # The lease reaper as the beat's housekeeping runs it (its re-rings reach this
                # worker), until every run has ended.
                expired_leases_reap()
                return not TaskExecution.platform.filter(
                    task=task, status__in=("queued", "running", "pending")
                ).exists()

            wait_until(ended, timeout=60, interval=0.25, message="the runs to end")
    except BaseException:
        print(dump_logs(worker))
        raise
    finally:
        worker.stop()
    # Held by a live process all along: never reaped, each run once, at its time.
    counts = ledger_counts(ledger)
    assert {run_id: counts[str(run_id)] for run_id in ids} == dict.fromkeys(ids, 1)
    assert list(ExecutionLoss.platform.filter(execution_id__in=ids).values_list("reason")) == []
    rows = TaskExecution.platform.filter(task=task)
    assert sorted((row.status, row.attempt) for row in rows) == [("success", 1)] * RUNS
