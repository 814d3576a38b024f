"""Redis behind Sentinel: two beats and a worker reach Redis only through a real Sentinel
(REDIS_SENTINELS), the master is SIGKILLed, the Sentinel promotes the replica, and the
stack carries on: fires resume within 15 s, no fire is recorded twice or run twice (the
fencing epoch and the database's unique key hold even though the failover can lose the lock
and queued doorbells with the writes the replica had not received), every run ends."""

from __future__ import annotations

import collections

import pytest
from django.utils import timezone

import tests.ledger  # noqa: F401 (registers the `ledger` handler in this process)
from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import TaskExecution
from scheduler_app.services.task_definitions import task_pause
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.ledger import ledger_counts, ledger_env
from tests.processes import start_beat, stop_all, wait_until
from tests.redis_servers import start_sentinel_group
from tests.supervisor import WorkerSupervisor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RESUME_LIMIT_SECONDS = 15


@pytest.fixture
def sentinel_group():
    group = start_sentinel_group()
    yield group
    group.stop()


def _every_second_task(tenant, ledger):
    return make_task(
        tenant,
        name="every-second",
        schedule={"type": "cron", "expression": "* * * * * *"},
        handler={"type": "python", "callable": "ledger"},
        parameters={"path": str(ledger)},
    )


def test_a_sentinel_failover_loses_no_fire_and_doubles_none(tenant, sentinel_group, tmp_path):
    ledger = tmp_path / "ledger.txt"
    task = _every_second_task(tenant, ledger)
    env = {
        **sentinel_group.env(),
        **ledger_env(),
        # Doorbells the failover loses (not yet replicated) are rung again after this.
        "SCHEDULER_REQUEUE_GRACE": "5",
    }
    # Supervised, as in production: Celery's worker may exit when its Redis fails over under
    # unacknowledged messages (tests/supervisor.py); it is started again, against the sentinel.
    # The beats boot while the worker does.
    beats = [start_beat(node_id=node, env_overrides={**FAST_BEAT, **env}) for node in ("s1", "s2")]
    supervisor = WorkerSupervisor()
    supervisor.start("w-sentinel", concurrency=2, env_overrides={**FAST_WORKER, **env})

    def processes():
        return [*supervisor.workers.values(), *beats]

    def succeeded_since(moment) -> int:
        return TaskExecution.platform.filter(
            task=task, status="success", scheduled_at__gt=moment
        ).count()

    try:
        started = timezone.now()
        wait_until(lambda: succeeded_since(started) >= 3, timeout=60, message="first runs")
        old_master = sentinel_group.master.port
        sentinel_group.master.kill()
        killed_at = timezone.now()
        wait_until(
            lambda: sentinel_group.master_port() != old_master,
            timeout=30,
            interval=0.2,
            message="the Sentinel to promote the replica",
        )
        # Fires resume: a run due after the kill has started within the limit.
        wait_until(
            lambda: succeeded_since(killed_at) >= 1,
            timeout=RESUME_LIMIT_SECONDS + 5,
            interval=0.2,
            message="runs after the failover",
        )
        first_after = (
            TaskExecution.platform.filter(task=task, scheduled_at__gt=killed_at, status="success")
            .order_by("started_at")
            .first()
        )
        resumed_seconds = (first_after.started_at - killed_at).total_seconds()
        wait_until(lambda: succeeded_since(killed_at) >= 5, timeout=60, message="steady firing")
        # No more fires; the beats stay up to reap and ring again what the failover left.
        task_pause(task=task)
        stopped_at = timezone.now()
        # Every recorded run ends (the doorbells lost with the old master are rung again).
        wait_until(
            lambda: (
                not TaskExecution.platform.filter(task=task)
                .exclude(status__in=TERMINAL_STATUSES)
                .exists()
            ),
            timeout=60,
            interval=0.5,
            message="every recorded run to end",
        )
    except AssertionError:
        print(dump_logs(*processes()))
        print(sentinel_group.sentinel.log())
        raise
    finally:
        supervisor.stop()
        stop_all(beats)

    print(
        f"Sentinel failover: first run after the kill started {resumed_seconds:.1f}s after it"
        f" ({supervisor.restarts} worker restarts)"
    )
    assert resumed_seconds <= RESUME_LIMIT_SECONDS, dump_logs(*processes())
    executions = list(TaskExecution.platform.filter(task=task, scheduled_at__lt=stopped_at))
    fires = collections.Counter(e.scheduled_at for e in executions if e.attempt == 1)
    assert max(fires.values()) == 1, "a fire was recorded twice"
    counts = ledger_counts(ledger)
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
    assert {str(e.id) for e in executions if e.status == "success"} <= set(counts)
    # Both beats saw the failover and one of them leads after it.
    assert any("is now the leader" in b.log() for b in beats)
