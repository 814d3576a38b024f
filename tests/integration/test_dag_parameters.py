"""Run parameters (POST dags/{id}/trigger) reach every node's handler, merged with the
node's own parameters, on a real worker."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = {"type": "python", "callable": "echo"}


def test_trigger_parameters_reach_every_node_with_documented_precedence(api, tenant, live_worker):
    # Lowest to highest: the referenced task's parameters, the DAG's `parameters`, the
    # node's `parameters`, the run's trigger parameters (and a shard's `item` on top).
    make_task(
        tenant,
        name="shared-echo",
        schedule={"type": "manual"},
        handler=ECHO,
        parameters={"from_task": "task", "task_vs_dag": "task"},
    )
    definition = {
        "dag": "with-parameters",
        "parameters": {"task_vs_dag": "dag", "dag_vs_node": "dag", "from_dag": "dag"},
        "tasks": [
            {"id": "inline", "handler": ECHO, "parameters": {"dag_vs_node": "node"}},
            {
                "id": "referenced",
                "task": "shared-echo",
                "depends_on": ["inline"],
                "parameters": {"node_vs_run": "node"},
            },
            {"id": "mapped", "handler": ECHO, "depends_on": ["inline"], "map_over": [1, 2]},
        ],
    }
    created = api.post("/api/v1/dags", definition, format="json")
    assert created.status_code == 201, created.content
    dag_id = created.json()["id"]
    trigger = api.post(
        f"/api/v1/dags/{dag_id}/trigger",
        {"parameters": {"node_vs_run": "run", "from_run": "run"}},
        format="json",
    )
    assert trigger.status_code == 202, trigger.content
    run_id = trigger.json()["id"]
    try:
        wait_until(
            lambda: DagRun.platform.get(id=run_id).status not in ("running", "queued"),
            timeout=60,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    run = DagRun.platform.get(id=run_id)
    assert run.status == "success"
    nodes = {s.node_id: s for s in DagNodeState.objects.filter(run=run)}
    assert nodes["inline"].result == {
        "task_vs_dag": "dag",
        "dag_vs_node": "node",
        "from_dag": "dag",
        "node_vs_run": "run",
        "from_run": "run",
    }
    assert nodes["referenced"].result == {
        "from_task": "task",
        "task_vs_dag": "dag",
        "dag_vs_node": "dag",
        "from_dag": "dag",
        "node_vs_run": "run",
        "from_run": "run",
    }
    shards = nodes["mapped"].result["results"]
    assert [shard["item"] for shard in shards] == [1, 2]
    assert all(shard["from_run"] == "run" and shard["from_dag"] == "dag" for shard in shards)
