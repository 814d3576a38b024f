"""A tenant floods its live logs on a real worker: the Redis memory its tails take stays
within its budget, another tenant's run goes on meanwhile, every line still reaches the
stored logs, and each tail is gone soon after its run ends.

Before the budget, each run's tail could hold 10 MB for an hour in the broker's own Redis:
these three runs alone would have put 15 MB there (20 such runs added 215 MB, and a Redis
at its maxmemory then refused the broker's writes)."""

from __future__ import annotations

import time

import pytest

from scheduler_app.live_logs import CUT, live_logs_redis, log_stream_key
from scheduler_app.models import ExecutionLog, TaskExecution, Tenant
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import all_terminal, fleet_worker
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RUN_MAX = 64 * 1024
TENANT_MAX = 160 * 1024
ENDED_TTL = 2
FLOOD_RUNS = 3
# 5,000 lines of 1,000 bytes (5 MB) per run, 75 times its live budget; then a pause, so that
# the tails are measured while their runs are still going.
FLOOD = "head -c 5000000 /dev/zero | tr '\\0' x | fold -w 1000; echo; sleep 4; echo flood-done"
# Normally about a second from trigger to success on this worker; the bound is generous so
# that only a stalled Redis or worker, not a loaded machine, fails it.
OTHER_TENANT_BOUND_SECONDS = 20.0


def _memory(keys: list[str]) -> int:
    client = live_logs_redis()
    return sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)


def _cut(key: str) -> bool:
    last = live_logs_redis().xrevrange(key, count=1)
    return bool(last) and CUT in last[0][1]


def test_a_live_log_flood_stays_in_budget_and_another_tenant_runs_on(
    tenant_factory, private_broker
):
    attacker, _ = tenant_factory("acme")
    victim, _ = tenant_factory("demo")
    worker = fleet_worker(
        "live-flood",
        concurrency=4,
        LIVE_LOG_RUN_MAX_BYTES=str(RUN_MAX),
        LIVE_LOG_TENANT_MAX_BYTES=str(TENANT_MAX),
        LIVE_LOG_ENDED_TTL_SECONDS=str(ENDED_TTL),
    )
    floods = [
        make_task(
            attacker,
            name=f"flood-{index}",
            schedule={"type": "manual"},
            handler={"type": "shell", "command": ["sh", "-c", FLOOD]},
            retry_policy={"max_attempts": 1},
        )
        for index in range(FLOOD_RUNS)
    ]
    quick = make_task(
        victim,
        name="quick",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", "echo still-served"]},
        retry_policy={"max_attempts": 1},
    )
    try:
        runs = [task_trigger(task=task) for task in floods]
        keys = [log_stream_key(str(run.id)) for run in runs]
        flooding = TaskExecution.platform.filter(id__in=[run.id for run in runs])
        wait_until(
            lambda: flooding.filter(status="running").count() == FLOOD_RUNS,
            timeout=60,
            message="the flood runs to start",
        )
        # Measured over the whole flood: the most the attacker's tails ever held.
        peak = 0

        def cut_everywhere() -> bool:
            nonlocal peak
            peak = max(peak, _memory(keys))
            return all(_cut(key) for key in keys)

        wait_until(cut_everywhere, timeout=60, interval=0.05, message="every tail to be cut")

        started = time.monotonic()
        other = task_trigger(task=quick)
        wait_until(
            lambda: TaskExecution.platform.get(id=other.id).status == "success",
            timeout=60,
            interval=0.05,
            message="the other tenant's run",
        )
        other_seconds = time.monotonic() - started

        def flood_over() -> bool:
            nonlocal peak
            peak = max(peak, _memory(keys))
            return all_terminal(flooding)

        wait_until(flood_over, timeout=120, interval=0.05, message="the flood runs to end")
        assert worker.alive()
        # The tails are deleted ENDED_TTL seconds after their runs ended.
        wait_until(
            lambda: live_logs_redis().exists(*keys) == 0,
            timeout=ENDED_TTL + 10,
            message="the tails to be gone",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    finally:
        worker.stop()
    print(
        f"live-log flood: {FLOOD_RUNS} runs x 5 MB, tails peaked at {peak} bytes in Redis "
        f"(tenant budget {TENANT_MAX}); the other tenant's run took {other_seconds:.2f} s"
    )
    assert 0 < peak <= TENANT_MAX
    assert other_seconds < OTHER_TENANT_BOUND_SECONDS
    # The runs themselves ran to the end, and their stored logs have every line.
    for run in runs:
        execution = TaskExecution.platform.get(id=run.id)
        assert execution.status == "success", execution.error_message
        log = ExecutionLog.platform.get(execution_id=run.id)
        assert not log.truncated and "flood-done" in log.text
        assert sum(1 for line in log.text.splitlines() if line.endswith("x" * 1000)) == 5000
    assert Tenant.objects.get(id=victim.id).slug == "demo"
