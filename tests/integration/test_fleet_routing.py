"""Sticky routing hit rate, and a 1 GB-output task, with real workers."""

from __future__ import annotations

import psutil
import pytest
from django.conf import settings

from scheduler_app.live_logs import live_logs_redis, log_stream_key
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.redis_client import get_redis
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import (
    FLEET_BEAT,
    all_terminal,
    finals,
    fleet_worker,
    fleet_workers,
)
from tests.processes import start_beat, stop_all, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
    pytest.mark.needs_os_tool("bubblewrap"),
]

RUNS = 16
WAVE = 4


def test_retries_go_back_to_the_worker_that_ran_the_first_attempt(tenant):
    """A retry goes to its worker when that worker has a free slot; a retry promoted in a
    batch larger than the worker's free slots overflows to the tier queue on purpose. The 16
    runs come in waves of 4 on 2 x 4 slots, so every wave's retries fit their workers' free
    slots whichever way the first attempts were spread (all 16 at once would fail together
    and have their 16 retries promoted in one batch, of which at most 8 can fit)."""
    task = make_task(
        tenant,
        name="fails-once",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", 'test "$TASK_ATTEMPT" -ge 2']},
        retry_policy={"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 1},
    )
    beat = start_beat(node_id="sticky", env_overrides=FLEET_BEAT)
    # The retry budget is tested on its own; here it must not defer the 30 retries.
    workers = fleet_workers(
        [f"sticky{i}" for i in range(2)], concurrency=4, RETRY_BUDGET_MIN_PER_MINUTE="1000"
    )
    try:
        for wave in range(1, RUNS // WAVE + 1):
            for _ in range(WAVE):
                task_trigger(task=task)
            wait_until(
                lambda wave=wave: (
                    len(finals(task)) == wave * WAVE
                    and all(e.status == "success" for e in finals(task).values())
                ),
                timeout=60,
                interval=0.2,
                message=f"every run of wave {wave} to succeed on its retry",
            )
    except AssertionError:
        print(dump_logs(beat, *workers))
        raise
    finally:
        stop_all([*workers, beat])
    by_id = {e.id: e for e in TaskExecution.platform.filter(task=task)}
    retries = [e for e in by_id.values() if e.retry_of_id]
    assert len(retries) == RUNS
    hits = sum(1 for e in retries if e.worker_id == by_id[e.retry_of_id].worker_id)
    rate = hits / len(retries)
    print(f"sticky routing hit rate: {hits}/{len(retries)} = {rate:.0%}")
    # Without stickiness two equal workers would match about half the time.
    assert rate >= 0.8


def test_a_task_printing_1_gb_is_truncated_and_nothing_runs_out_of_memory(tenant):
    worker = fleet_worker("gigabyte", concurrency=1)
    line = "x" * 1000
    task = make_task(
        tenant,
        name="firehose",
        schedule={"type": "manual"},
        handler={
            "type": "shell",
            "command": ["sh", "-c", f'yes "{line}" | head -c 1073741824; echo done'],
        },
        timeout_seconds=600,
    )
    redis = get_redis()
    used_before = int(redis.info("memory")["used_memory"])
    peak_rss = 0
    try:
        execution = task_trigger(task=task)

        def finished() -> bool:
            nonlocal peak_rss
            processes = [psutil.Process(worker.pid), *psutil.Process(worker.pid).children()]
            peak_rss = max(peak_rss, sum(p.memory_info().rss for p in processes))
            return all_terminal(TaskExecution.platform.filter(id=execution.id))

        wait_until(finished, timeout=300, interval=0.5, message="the 1 GB run to end")
        assert worker.alive()
    except AssertionError:
        print(dump_logs(worker))
        raise
    finally:
        worker.stop()
    execution.refresh_from_db()
    assert execution.status == "success", execution.error_message
    log = ExecutionLog.platform.get(execution_id=execution.id)
    assert log.truncated
    assert log.size_bytes <= 10 * 1024 * 1024 + 200
    assert "[log truncated after" in log.text
    # The live tail (on the live-log Redis) was cut at the run's budget; it is deleted
    # shortly after the run, so it may be gone already.
    stream = log_stream_key(str(execution.id))
    stream_bytes = int(live_logs_redis().memory_usage(stream, samples=0) or 0)
    assert stream_bytes <= settings.LIVE_LOGS["RUN_MAX_BYTES"] + 4096
    used_after = int(redis.info("memory")["used_memory"])
    redis_growth = (used_after - used_before) / 2**20
    print(
        f"1 GB output: persisted {log.size_bytes} bytes, stream {stream_bytes} bytes, "
        f"worker peak RSS {peak_rss / 2**20:.0f} MiB, Redis used {redis_growth:+.0f} MiB"
    )
    assert stream_bytes < 40 * 1024 * 1024
    assert peak_rss < 600 * 1024 * 1024
