"""Next DAG nodes prefer the worker that ran their upstream node (data locality), with two
real workers on a private broker."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import fleet_workers
from tests.processes import stop_all, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = {"type": "python", "callable": "noop"}
WIDTH = 4


@pytest.mark.parametrize("continuation_seconds", ["0", "10"])
def test_downstream_nodes_run_on_the_worker_of_their_upstream(
    tenant,
    private_broker,
    continuation_seconds,
):
    # Without continuation every successor rings a sticky doorbell; with it, one runs in
    # the finishing process and the others ring sticky. Either way they stay on one worker,
    # where two equal workers sharing the tier queue would split 6 nodes at random.
    workers = fleet_workers(
        [f"dag-sticky{i}" for i in range(2)],
        concurrency=WIDTH + 2,
        DAG_CONTINUATION_SECONDS=continuation_seconds,
    )
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "locality",
            "tasks": [
                {"id": "a", "handler": NOOP},
                *({"id": f"b{i}", "handler": NOOP, "depends_on": ["a"]} for i in range(WIDTH)),
                {"id": "c", "handler": NOOP, "depends_on": [f"b{i}" for i in range(WIDTH)]},
            ],
        },
    )
    try:
        run = dag_trigger(dag=dag)
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status != "running",
            timeout=60,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(*workers))
        raise
    finally:
        stop_all(workers)
    run.refresh_from_db()
    assert run.status == "success"
    ran_on = {
        state.node_id: TaskExecution.platform.get(id=state.execution_id).worker_id
        for state in DagNodeState.objects.filter(run=run)
    }
    assert len(ran_on) == WIDTH + 2
    assert set(ran_on.values()) == {ran_on["a"]}, ran_on
