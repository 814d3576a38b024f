"""A durable sleep across a full restart of beat and workers, on the real processes: every
process is SIGKILLed while the node sleeps, new ones start, and the node wakes once, not
before its time. A sensor beside it is polled by the new leader, holding no worker slot
(no execution exists while it senses), and releases the join once its target is ready."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction
from django.utils import timezone

from dags.models import DagNodeState, DagRun, DagTimer
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution, Tenant
from tests.dags.sensor_targets import http_target_serving
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.processes import start_beat, start_worker, stop_all, wait_for_beat_tick, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# Short, but longer than the first leader takes to poke the sensor once (about a second).
SLEEP_SECONDS = 4
ECHO = {"type": "python", "callable": "upstream_echo"}


@pytest.fixture
def http_target():
    with http_target_serving() as target:
        yield target


def _state(run, node_id):
    return DagNodeState.objects.get(run=run, node_id=node_id)


def test_a_sleep_survives_a_restart_of_every_process_and_wakes_once(
    tenant, private_broker, http_target
):
    Tenant.objects.filter(id=tenant.id).update(webhook_allowed_hosts=["127.0.0.1"])
    tenant.refresh_from_db()
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "nap-through-restart",
            "tasks": [
                {"id": "nap", "type": "sleep", "duration": f"{SLEEP_SECONDS}s"},
                {
                    "id": "probe",
                    "type": "sensor",
                    "sensor": {"kind": "http", "url": http_target.url},
                    "interval": "1s",
                    "max_interval": "1s",
                    "timeout": "5m",
                },
                {"id": "after", "handler": ECHO, "depends_on": ["nap", "probe"]},
            ],
        },
    )
    # The first worker is killed before anything could run on it: no need to wait for it.
    processes = [
        start_worker(name="w-sleepy-1", concurrency=1, env_overrides=FAST_WORKER, wait=False),
        start_beat(node_id="sleepy-1", env_overrides=FAST_BEAT),
    ]
    try:
        wait_for_beat_tick("sleepy-1", after=time.time())
        with transaction.atomic():
            run = dag_trigger(dag=dag)
        timer = DagTimer.platform.get(run=run, node_id="nap")
        assert _state(run, "nap").status == "sleeping"
        # The first leader polls the sensor (its target still answers 503).
        wait_until(
            lambda: DagTimer.platform.get(run=run, node_id="probe").attempts >= 1,
            timeout=30,
            message="the first beat to poke the sensor",
        )
        for process in processes:
            process.kill(signal.SIGKILL)
        for process in processes:
            process.process.wait(timeout=10)
        assert timezone.now() < timer.due_at, "the restart must happen while the node sleeps"
        assert _state(run, "nap").status == "sleeping"
        assert _state(run, "probe").status == "sensing"
        assert not TaskExecution.platform.exists()  # sensing and sleeping hold no worker slot

        worker = start_worker(
            name="w-sleepy-2", concurrency=1, env_overrides=FAST_WORKER, wait=False
        )
        processes += [worker, start_beat(node_id="sleepy-2", env_overrides=FAST_BEAT)]
        wait_until(
            lambda: _state(run, "nap").status == "success",
            timeout=60,
            message="the sleep to wake after the restart",
        )
        assert not TaskExecution.platform.exists()  # the sensor still senses, on no worker
        assert _state(run, "probe").status == "sensing"
        http_target.status, http_target.body = 200, {"state": "ready"}
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status != "running",
            timeout=60,
            message="the run to end",
        )
    except AssertionError:
        print(dump_logs(*processes))
        raise
    finally:
        stop_all(processes)
    run.refresh_from_db()
    assert run.status == "success"
    nap = _state(run, "nap")
    timer.refresh_from_db()
    assert timer.status == "fired"
    # Once, and not before its time.
    assert nap.result["due_at"] == timer.due_at.isoformat()
    assert nap.result["woke_at"] >= timer.due_at.isoformat()
    assert _state(run, "probe").result == {"state": "ready"}
    assert TaskExecution.platform.filter(status="success").count() == 1
    assert TaskExecution.platform.count() == 1
