"""An attacker's fan-out from an upstream result, past DAG_MAX_MAP_ITEMS, on the real worker.

Before: a literal list of 10,001 items was a 400, but a node whose result held 20,000 items
made 20,004 executions. Now the cap holds at dispatch too: the mapped node fails naming the
cap and the count, and creates nothing, while another tenant's no-ops are timed."""

from __future__ import annotations

import pytest
from django.conf import settings

from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.integration.bystander import Bystander
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_fan_out_past_the_cap_fails_its_node_and_creates_nothing(tenant_factory, live_worker):
    acme, _ = tenant_factory("acme")
    demo, _ = tenant_factory("demo")
    bystander = Bystander(demo)
    bystander.run_once()
    bystander.seconds.clear()
    items = settings.DAG_MAX_MAP_ITEMS * 2
    dag = dag_create(
        tenant=acme,
        raw={
            "dag": "fan-out-bomb",
            "tasks": [
                {
                    "id": "produce",
                    "handler": {"type": "python", "callable": "echo"},
                    "parameters": {"items": [0] * items},
                },
                {
                    "id": "fan",
                    "handler": {"type": "python", "callable": "noop"},
                    "depends_on": ["produce"],
                    "map_over": {"field": "produce.result.items"},
                },
            ],
        },
    )
    run = dag_trigger(dag=dag)

    def attack_going() -> bool:
        return DagRun.platform.get(id=run.id).status in ("running", "queued")

    try:
        seconds = bystander.run_while(attack_going)
        wait_until(lambda: not attack_going(), timeout=60, message="the attacker's run to end")
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    print("\nbystander no-ops " + ", ".join(f"{s:.3f}" for s in seconds) + " s")

    fan = DagNodeState.objects.get(run=run, node_id="fan")
    assert fan.status == "failed"
    assert f"map_over has {items} items" in fan.error_message
    assert f"at most {settings.DAG_MAX_MAP_ITEMS}" in fan.error_message
    assert fan.map_total is None
    assert not DagNodeExecution.objects.filter(run=run, node_id="fan").exists()
    fan_task = dag.versions.get().node_tasks["fan"]
    assert not TaskExecution.platform.filter(task_id=fan_task).exists()
    assert DagRun.platform.get(id=run.id).status == "partially_completed"  # produce succeeded
    assert max(seconds) < 5.0, seconds


def test_a_written_list_past_the_cap_is_a_400_naming_the_node(api):
    response = api.post(
        "/api/v1/dags",
        {
            "dag": "too-wide",
            "tasks": [
                {
                    "id": "fan",
                    "handler": {"type": "python", "callable": "noop"},
                    "map_over": list(range(settings.DAG_MAX_MAP_ITEMS + 1)),
                }
            ],
        },
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "tasks[0].map_over"
    assert "'fan'" in body["message"] and "10001 items" in body["message"]
