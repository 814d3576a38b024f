"""DAG runs end to end with real PostgreSQL, Redis and Celery workers."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = {"type": "python", "callable": "upstream_echo"}


def node(node_id, *depends_on, handler=None, **extra):
    return {"id": node_id, "handler": handler or ECHO, "depends_on": list(depends_on), **extra}


def run_dag(tenant, worker, tasks, timeout=60, **dag_fields):
    dag = dag_create(tenant=tenant, raw={"dag": "d", "tasks": tasks, **dag_fields})
    run = dag_trigger(dag=dag)
    try:
        wait_until(
            lambda: DagRun.objects.get(id=run.id).status not in ("running", "queued"),
            timeout=timeout,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    run.refresh_from_db()
    return run, {s.node_id: s for s in DagNodeState.objects.filter(run=run)}


def executions_of(run):
    from dags.models import DagNodeExecution

    roots = DagNodeExecution.objects.filter(run=run).values_list("execution_root_id", flat=True)
    return TaskExecution.objects.filter(root_execution_id__in=list(roots))


def test_diamond_runs_in_order_and_passes_results(tenant, live_worker):
    run, nodes = run_dag(
        tenant,
        live_worker,
        [
            node("a", parameters={"v": 1}),
            node("b", "a", parameters={"v": 2}),
            node("c", "a", parameters={"v": 3}),
            node("d", "b", "c"),
        ],
    )
    assert run.status == "success"
    assert {n: s.status for n, s in nodes.items()} == dict.fromkeys("abcd", "success")
    upstream = nodes["d"].result["upstream"]
    assert upstream["b"]["v"] == 2 and upstream["c"]["v"] == 3
    assert upstream["b"]["upstream"]["a"]["v"] == 1
    execs = {e.root_execution_id: e for e in executions_of(run)}
    by_node = {s.node_id: execs[s.execution_id] for s in nodes.values()}
    assert by_node["d"].started_at >= max(by_node["b"].completed_at, by_node["c"].completed_at)
    assert by_node["b"].started_at >= by_node["a"].completed_at
    assert all(e.trigger == "dag" for e in by_node.values())
