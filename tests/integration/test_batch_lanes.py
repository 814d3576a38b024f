"""A batch of shell runs through a real worker of one process: its runs run side by side
(WORKER_BATCH_PARALLEL lanes), and each is claimed and finished exactly once."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from tests.factories import make_queued_runs, make_task
from tests.integration.conftest import FAST_WORKER, dump_logs
from tests.processes import broker_key_prefix, start_worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("bubblewrap")]

RUNS = 4


def test_a_batch_of_shell_runs_runs_side_by_side_and_each_run_once(tenant):
    prefix = f"lanes-{uuid.uuid4().hex[:10]}:"
    worker = start_worker(
        name="lanes",
        concurrency=1,  # one process: runs that overlap ran in its lanes
        env_overrides={
            **FAST_WORKER,
            "BROKER_KEY_PREFIX": prefix,
            "WORKER_BATCH_PARALLEL": str(RUNS),
            # No spill: the successes are finished together, at the batch's end.
            "WORKER_BATCH_SPILL_SECONDS": "60",
        },
    )
    try:
        task = make_task(
            tenant,
            name="sleepers",
            schedule={"type": "manual"},
            handler={"type": "shell", "command": ["sh", "-c", "sleep 2; echo done-$TASK_ATTEMPT"]},
            retry_policy={"max_attempts": 1},
        )
        runs = make_queued_runs(
            task, RUNS, queue="normal", due=timezone.now() - timedelta(seconds=1)
        )
        bells = [Doorbell(str(run.id), str(tenant.id), "normal") for run in runs]
        with broker_key_prefix(prefix):
            # One message for all of them: one process, a burst twice its size or more.
            assert ring(bells, sticky=False, batch=128, processes=1) == RUNS
        ids = [run.id for run in runs]

        def finished() -> bool:
            done = TaskExecution.platform.filter(id__in=ids, status="success").count()
            return done == RUNS

        wait_until(finished, timeout=90, message="the batch to finish")
        worker.wait_for_log(f"batch of {RUNS}: {RUNS} success", timeout=30)
    except BaseException:
        print(dump_logs(worker))
        raise
    finally:
        worker.stop()
    rows = list(TaskExecution.platform.filter(task=task))
    assert len(rows) == RUNS  # no retry, no second attempt
    for row in rows:
        assert row.status == "success" and row.attempt == 1
        assert row.worker_id == rows[0].worker_id and row.lease_expires_at is None
        assert row.claim_token is not None
    # One batch, claimed once: its summary names every run once, no duplicate, nothing
    # finished one by one (a second claim or finish would show in it).
    summaries = re.findall(r"'(batch of \d+: [^']*)'", worker.log())
    assert summaries == [f"batch of {RUNS}: {RUNS} success"]
    # All four were asleep in their sandboxes at the same time, in one worker process.
    assert max(row.started_at for row in rows) < min(row.completed_at for row in rows)
