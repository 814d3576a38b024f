"""A dispatch wave written in one statement: every ready node gets its execution, its link
and a queued state, with the node's parameters (real PostgreSQL)."""

from __future__ import annotations

import pytest

from dags.models import DagNodeExecution, DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


def test_a_wave_writes_each_nodes_execution_link_and_state(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "wave",
            "tasks": [
                {"id": "plain", "handler": NOOP},
                {"id": "with_params", "handler": NOOP, "parameters": {"n": 3, "s": "x"}},
                {"id": "later", "handler": NOOP, "depends_on": ["plain", "with_params"]},
                *({"id": f"w{i}", "handler": NOOP} for i in range(40)),
            ],
        },
    )
    run = dag_trigger(dag=dag)
    states = {s.node_id: s for s in DagNodeState.objects.filter(run=run)}
    assert states["later"].status == "waiting" and states["later"].execution_id is None
    dispatched = {node: s for node, s in states.items() if node != "later"}
    assert len(dispatched) == 42
    executions = {
        e.id: e
        for e in TaskExecution.platform.filter(id__in=[s.execution_id for s in dispatched.values()])
    }
    links = {link.execution_root_id: link for link in DagNodeExecution.objects.filter(run=run)}
    assert len(executions) == len(links) == 42
    for node_id, state in dispatched.items():
        assert (state.status, state.attempts) == ("queued", 1)
        execution = executions[state.execution_id]
        assert (execution.status, execution.trigger, execution.attempt) == ("queued", "dag", 1)
        assert execution.root_execution_id == execution.id
        assert execution.tenant_id == tenant.id
        assert execution.queued_at == execution.scheduled_at
        assert execution.worker_id == "" and execution.error_message == ""
        assert not execution.dead_lettered
        link = links[execution.id]
        assert (link.node_id, link.shard_index, link.status) == (node_id, None, "")
    assert executions[states["with_params"].execution_id].parameters == {"n": 3, "s": "x"}
    assert executions[states["plain"].execution_id].parameters is None


def test_a_wide_map_chord_carries_several_shards_per_member_a_narrow_one_one(settings):
    from dags.engine.dispatch import wave_batch
    from scheduler_app.ringing.publish import BURST_MESSAGES

    settings.SCHEDULER = {**settings.SCHEDULER, "DOORBELL_BATCH": 64}
    assert [wave_batch(n) for n in (1, 3, 2 * BURST_MESSAGES - 1)] == [1, 1, 1]
    assert wave_batch(2 * BURST_MESSAGES) == 2
    assert wave_batch(500) == 32  # 16 members: every worker process gets a share
    assert wave_batch(50_000) == 64
    settings.SCHEDULER = {**settings.SCHEDULER, "DOORBELL_BATCH": 1}
    assert wave_batch(500) == 1


def test_a_wave_reads_its_tasks_with_one_query_whatever_their_number(tenant):
    """Each node's tier queue comes from its task's handler type: read with the wave's one
    query of the tasks, not loaded again per task (a field `.only()` left out was)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    dag = dag_create(
        tenant=tenant,
        raw={"dag": "wide", "tasks": [{"id": f"n{i}", "handler": NOOP} for i in range(12)]},
    )
    with CaptureQueriesContext(connection) as queries:
        run = dag_trigger(dag=dag)
    task_reads = [q["sql"] for q in queries if 'FROM "scheduler_app_taskdefinition"' in q["sql"]]
    assert len(task_reads) == 1, task_reads
    queues = set(
        TaskExecution.platform.filter(
            id__in=DagNodeState.objects.filter(run=run).values("execution_id")
        ).values_list("queue", flat=True)
    )
    assert queues == {"normal"}
