"""A reaper whose wall clock is stepped 30 s ahead (NTP, a VM resumed; the nemesis' beat
clock step) beside a live worker, all real processes: the beat's housekeeping must not take
the worker for dead nor its runs' leases for expired. It did: the heartbeats' age and the
leases were judged by the reaper's own clock, so a beat 30 s ahead found every worker
silent for 30 s and every lease run out, and handed runs still running in a live process
to other ones (the nemesis saw runs of a worker it never harmed executed twice). Heartbeats
are now aged by the registry's clock (Redis's), leases by PostgreSQL's."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.ledger  # noqa: F401 (registers the `ledger` handler in this process)
from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.chaos.nemesis import faketime_env
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import FLEET_BEAT, fleet_worker
from tests.ledger import ledger_counts, ledger_env
from tests.processes import start_beat, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
    pytest.mark.needs_os_tool("faketime"),
]

RUNS = 3
HANDLER_SECONDS = 4.0  # several of the beat's housekeeping rounds (0.5 s apart)


def test_a_beat_whose_clock_runs_30s_ahead_reaps_no_live_worker(tenant, tmp_path: Path):
    clock = tmp_path / "beat.clock"
    clock.write_text("+30\n")
    ledger = tmp_path / "ledger.txt"
    beat = start_beat(node_id="ahead", env_overrides={**FLEET_BEAT, **faketime_env(clock)})
    worker = fleet_worker("steady", concurrency=RUNS, **ledger_env())
    try:
        beat.wait_for_log("is now the leader", timeout=60)
        task = make_task(
            tenant,
            name="steady",
            schedule={"type": "manual"},
            handler={"type": "python", "callable": "ledger"},
            parameters={"path": str(ledger), "seconds": HANDLER_SECONDS},
            retry_policy={"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0},
            timeout_seconds=60,
        )
        ids = [task_trigger(task=task).id for _ in range(RUNS)]

        def ended() -> bool:
            return not TaskExecution.platform.filter(
                task=task, status__in=("pending", "queued", "running")
            ).exists()

        wait_until(ended, timeout=90, interval=0.25, message="the runs to end")
    except BaseException:
        print(dump_logs(worker, beat))
        raise
    finally:
        worker.stop()
        beat.stop()
    assert "marked dead" not in beat.log(), dump_logs(beat)
    counts = ledger_counts(ledger)
    assert {run_id: counts[str(run_id)] for run_id in ids} == dict.fromkeys(ids, 1)
    assert list(ExecutionLoss.platform.filter(execution_id__in=ids).values_list("reason")) == []
    rows = TaskExecution.platform.filter(task=task)
    assert sorted((row.status, row.attempt) for row in rows) == [("success", 1)] * RUNS
