"""DAG nodes under flow control: two nodes sharing a pool take its slots in turn, a node's
key can read its DAG's name, and bad flow fields of a node are refused naming the node."""

from __future__ import annotations

import pytest
from django.db import transaction

from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskExecution
from scheduler_app.services.pools import pool_create
from tests.flow.helpers import claim_and_admit

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


def test_two_nodes_sharing_a_pool_take_its_one_slot_in_turn(tenant):
    pool_create(tenant=tenant, name="warehouse", slots=1)
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "etl",
            "tasks": [
                {"id": "load-a", "handler": NOOP, "pool": "warehouse"},
                {
                    "id": "load-b",
                    "handler": NOOP,
                    "pool": "warehouse",
                    "concurrency": [{"key": "{{ dag }}", "max_running": 5}],
                },
            ],
        },
    )
    with transaction.atomic():
        run = dag_trigger(dag=dag)
        transaction.get_connection().run_on_commit.clear()  # no doorbell: this test claims
    ids = list(DagNodeState.objects.filter(run=run).values_list("execution_id", flat=True))
    executions = list(TaskExecution.platform.filter(id__in=ids).order_by("scheduled_at"))
    assert len(executions) == 2
    verdict = claim_and_admit(executions)
    assert len(verdict.admitted) == 1 and len(verdict.waiting) == 1
    (waiting,) = verdict.waiting
    row = TaskExecution.platform.get(id=waiting.execution.id)
    assert row.waiting_for == {"kind": "pool", "key": "warehouse", "running": 1, "max": 1}
    held = TaskExecution.platform.get(id=verdict.admitted[0].execution.id).flow_holds
    assert f"p:{tenant.id}:warehouse" in held
    if "load-b" in verdict.admitted[0].task.name:
        assert f"c:{tenant.id}:etl" in held  # {{ dag }} is the DAG's name


def test_a_node_naming_an_unknown_pool_is_refused_naming_the_node(tenant):
    with pytest.raises(ValidationFailed) as error:
        dag_create(
            tenant=tenant,
            raw={"dag": "etl", "tasks": [{"id": "a", "handler": NOOP, "pool": "nowhere"}]},
        )
    assert error.value.field == "tasks[0].pool"


def test_a_node_naming_a_task_cannot_carry_its_own_flow_control(tenant):
    from tests.factories import make_task

    make_task(tenant, name="shared", schedule={"type": "manual"})
    with pytest.raises(ValidationFailed) as error:
        dag_create(
            tenant=tenant,
            raw={
                "dag": "etl",
                "tasks": [
                    {"id": "a", "task": "shared", "concurrency": [{"key": "k", "max_running": 1}]}
                ],
            },
        )
    assert error.value.field == "tasks[0].concurrency"
