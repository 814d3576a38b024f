"""A singleton DAG node on a real worker: a second run reaching the node while the first run's
execution of it is running joins that execution, and both runs end with its result, their
downstream nodes run by the worker too (real PostgreSQL, Redis and Celery worker)."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SLEEP = {"type": "python", "callable": "sleep"}
ECHO = {"type": "python", "callable": "upstream_echo"}


def _state(run, node_id: str) -> DagNodeState:
    return DagNodeState.objects.get(run=run, node_id=node_id)


def test_a_second_run_joins_the_running_singleton_node_and_both_end_with_its_result(
    tenant, live_worker
):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "refresh",
            "tasks": [
                {
                    "id": "fetch",
                    "handler": SLEEP,
                    "parameters": {"seconds": 5},  # the second run comes meanwhile
                    "singleton": {"key": "{{ dag }}"},
                },
                {"id": "report", "handler": ECHO, "depends_on": ["fetch"]},
            ],
        },
    )
    first = dag_trigger(dag=dag)
    shared = _state(first, "fetch").execution_id
    wait_until(
        lambda: TaskExecution.platform.get(id=shared).status == "running",
        timeout=60,
        message="the worker to start the singleton node's run",
    )
    second = dag_trigger(dag=dag)
    assert _state(second, "fetch").execution_id == shared  # joined, no run of its own
    try:
        wait_until(
            lambda: (
                not DagRun.platform.filter(
                    id__in=[first.id, second.id], status__in=("running", "queued")
                ).exists()
            ),
            timeout=90,
            message="both DAG runs to end",
        )
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    for run in (first, second):
        assert DagRun.platform.get(id=run.id).status == "success"
        fetch = _state(run, "fetch")
        assert fetch.status == "success" and fetch.result["slept"] == 5.0
        assert _state(run, "report").status == "success"
    node_task = first.version.node_tasks["fetch"]
    assert TaskExecution.platform.filter(task_id=node_task).count() == 1
