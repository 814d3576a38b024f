"""A worker SIGKILLed in the middle of a DAG: the run still completes, each node once.

The workers and the beat of this test use their own Redis database as broker, so the
session's shared worker never sees these doorbells: the only workers are the ones we kill
and start here.
"""

from __future__ import annotations

import os
import signal

import pytest
from celery import Celery
from django.conf import settings
from django.db import transaction

from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from project.settings.test_redis import claim_redis_db, release_redis_db
from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.ringing.publish import RUN_EXECUTION_TASK
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.processes import start_beat, start_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# The slow node is killed a moment after it is seen running, then runs again in full: long
# enough to be caught running, no longer.
SLOW_SECONDS = 4
# The killed worker is declared dead for its missed heartbeats within a second or so, and
# its running run re-queued then (the same attempt). (With the 10 s default heartbeat the
# lease reaper got there first, and the run, rung to the killed worker's own queue since it still
# looked alive (sticky routing), waited there for the requeue grace: 30 s.)
KILL_WORKER = {**FAST_WORKER, "WORKER_HEARTBEAT_SECONDS": "0.5"}


@pytest.fixture
def private_broker():
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    owner = f"{settings.RUN_ID}:{settings.XDIST_WORKER}:dag-kill"
    url, number = claim_redis_db(base, owner=owner)
    yield url
    release_redis_db(base, number, owner=owner)


def test_a_worker_killed_mid_dag_loses_nothing_and_runs_each_node_once(tenant, private_broker):
    env = {
        "REDIS_URL": private_broker,
        "CELERY_BROKER_URL": private_broker,
        "CELERY_RESULT_BACKEND": private_broker,
        "SCHEDULER_REDIS_PREFIX": f"dagkill:{settings.RUN_ID}:",
    }
    retry = {"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0}
    echo = {"type": "python", "callable": "upstream_echo"}
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "kill-me",
            "tasks": [
                {"id": "a", "handler": echo, "retry_policy": retry},
                {
                    "id": "slow",
                    "handler": {"type": "python", "callable": "sleep"},
                    "parameters": {"seconds": SLOW_SECONDS},
                    "depends_on": ["a"],
                    "retry_policy": retry,
                },
                {"id": "fan", "handler": echo, "depends_on": ["slow"], "map_over": [1, 2, 3]},
                {"id": "end", "handler": echo, "depends_on": ["fan"], "retry_policy": retry},
            ],
        },
    )
    beat = start_beat(node_id="dag-kill", env_overrides={**FAST_BEAT, **env})
    first = start_worker(name="w-doomed", concurrency=2, env_overrides={**KILL_WORKER, **env})
    second = None
    try:
        with transaction.atomic():
            run = dag_trigger(dag=dag)
            # Not to the session's broker (its shared worker would take it): ours only.
            transaction.get_connection().run_on_commit.clear()
        root = DagNodeState.objects.get(run=run, node_id="a").execution_id
        Celery(broker=private_broker, set_as_current=False).send_task(
            RUN_EXECUTION_TASK, args=[str(root)], queue="normal", routing_key="normal"
        )

        def slow_execution():
            state = DagNodeState.objects.get(run=run, node_id="slow")
            return state.execution_id and TaskExecution.platform.get(id=state.execution_id)

        wait_until(
            lambda: (e := slow_execution()) and e.status == "running",
            timeout=60,
            message="the slow node to be running",
        )
        first.kill(signal.SIGKILL)
        first.process.wait(timeout=10)
        # The kill landed mid-run (the node sleeps SLOW_SECONDS): nothing finished that attempt.
        assert slow_execution().status == "running"
        second = start_worker(name="w-rescue", concurrency=2, env_overrides={**KILL_WORKER, **env})
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status != "running",
            timeout=120,
            message="the run to end after the kill",
        )
    except AssertionError:
        print(dump_logs(*(p for p in (beat, first, second) if p)))
        raise
    finally:
        for process in (second, first, beat):
            if process:
                process.stop()
    run.refresh_from_db()
    assert run.status == "success"
    roots = DagNodeExecution.objects.filter(run=run)
    for link in roots:
        chain = TaskExecution.platform.filter(root_execution_id=link.execution_root_id)
        assert chain.filter(status="success").count() == 1, link
        assert chain.filter(status="running").count() == 0
    slow_chain = TaskExecution.platform.filter(root_execution_id=slow_execution().id).order_by(
        "attempt"
    )
    # The lost node went back to the queue as the same attempt (no retry spent) and the
    # rescue worker ran it; its history shows the loss.
    assert [(e.attempt, e.status, e.error_class) for e in slow_chain] == [(1, "success", "")]
    assert slow_chain[0].worker_id.startswith("w-rescue")
    losses = ExecutionLoss.platform.filter(execution_id=slow_chain[0].id)
    assert [loss.outcome for loss in losses] == ["requeued"]
    assert losses[0].worker_id.startswith("w-doomed")
    # Nodes that had finished before the kill were not run again.
    a_root = DagNodeState.objects.get(run=run, node_id="a").execution_id
    assert TaskExecution.platform.filter(root_execution_id=a_root).count() == 1
    fan = DagNodeState.objects.get(run=run, node_id="end").result["upstream"]["fan"]
    assert [shard["item"] for shard in fan["results"]] == [1, 2, 3]
