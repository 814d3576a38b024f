"""Egress runs go to the egress pool only, as Kubernetes deploys it: workers next to the data
(WORKER_SHELL_EGRESS=off) neither offer egress nor consume its queues, a worker that
consumes only `<tier>.egress` takes every egress run, and an egress run that reaches a data
worker anyway (a doorbell rung on its tier queue) is refused there without running."""

from __future__ import annotations

import pytest

from scheduler_app.models import ExecutionLog, TaskExecution, Tenant
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import fleet_worker, hostname_of, registered
from tests.processes import wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
]

EGRESS_QUEUES = "critical.egress,normal.egress,bulk.egress"


def _finished(execution_id) -> TaskExecution:
    wait_until(
        lambda: TaskExecution.platform.get(id=execution_id).status not in ("queued", "running"),
        timeout=60,
        message="the run to end",
    )
    return TaskExecution.platform.get(id=execution_id)


def test_egress_runs_go_to_the_egress_pool_and_nowhere_else(tenant):
    Tenant.objects.filter(id=tenant.id).update(shell_egress_allowed=True)
    tenant.refresh_from_db()
    data = fleet_worker("next-to-data", WORKER_SHELL_EGRESS="off")
    pool = None
    try:
        record = registered(data)
        assert "egress" not in record.capabilities
        assert not any(queue.endswith(".egress") for queue in record.queues)

        egress = make_task(
            tenant,
            name="calls-out",
            schedule={"type": "manual"},
            handler={"type": "shell", "command": ["echo", "out"], "network": "egress"},
            retry_policy={"max_attempts": 1},
        )
        plain = make_task(
            tenant,
            name="stays-in",
            schedule={"type": "manual"},
            handler={"type": "shell", "command": ["echo", "in"]},
        )
        assert (egress.capability, plain.capability) == ("egress", "")
        # A doorbell on the data worker's own tier queue (forged, or misrouted): it claims
        # the run and refuses it, the command never starts.
        forged = task_trigger(task=egress)
        assert forged.queue == "normal.egress"
        ring([Doorbell(execution_id=str(forged.id), tenant_id=str(tenant.id), queue="normal")])
        refused = _finished(forged.id)
        assert refused.status == "failed" and refused.error_class == "egress_unavailable"
        assert refused.worker_id == hostname_of(data)
        stored = ExecutionLog.platform.filter(execution_id=forged.id).first()
        assert stored is None or "[stdout] out" not in stored.text

        pool = fleet_worker("egress-pool", queues=EGRESS_QUEUES, WORKER_SHELL_EGRESS="on")
        pool_record = registered(pool)
        assert "egress" in pool_record.capabilities
        assert {"critical.egress", "normal.egress", "bulk.egress"} <= set(pool_record.queues)
        assert not {"critical", "normal", "bulk"} & set(pool_record.queues)

        runs = [task_trigger(task=egress) for _ in range(4)]
        stays = task_trigger(task=plain)
        for run in runs:
            done = _finished(run.id)
            assert done.status == "success", done.error_message
            assert done.worker_id == hostname_of(pool)
        done = _finished(stays.id)
        assert done.status == "success" and done.worker_id == hostname_of(data)
    except AssertionError:
        print(dump_logs(data, *([pool] if pool else [])))
        raise
    finally:
        for worker in (data, pool):
            if worker is not None:
                worker.stop(timeout=10)
