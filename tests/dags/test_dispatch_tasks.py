"""The engine reads an inline node's task once per process (it never changes: editing it on
its own is refused), and a task the tenant owns and a node names at every dispatch."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dags import versions
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from dags.versions import node_tasks_of_version
from scheduler_app.models import TaskDefinition, TaskExecution
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


def _task_reads(queries) -> int:
    return sum(1 for q in queries if 'FROM "scheduler_app_taskdefinition"' in q["sql"])


def test_an_inline_nodes_task_is_read_once_per_process(tenant):
    dag = dag_create(tenant=tenant, raw={"dag": "inline", "tasks": [{"id": "a", "handler": NOOP}]})
    versions._INLINE_TASKS.clear()
    with CaptureQueriesContext(connection) as first:
        dag_trigger(dag=dag)
    with CaptureQueriesContext(connection) as second:
        run = dag_trigger(dag=dag)
    assert _task_reads(first.captured_queries) == 1
    assert _task_reads(second.captured_queries) == 0
    state = DagNodeState.objects.get(run=run, node_id="a")
    assert TaskExecution.platform.get(id=state.execution_id).status == "queued"


def test_a_task_the_tenant_owns_is_read_at_every_dispatch_and_its_change_seen(tenant):
    shared = make_task(tenant, name="shared", schedule={"type": "manual"}, priority=5)
    dag = dag_create(tenant=tenant, raw={"dag": "names", "tasks": [{"id": "a", "task": "shared"}]})
    first = dag_trigger(dag=dag)
    TaskDefinition.platform.filter(id=shared.id).update(priority=9)  # a bulk tier's priority
    second = dag_trigger(dag=dag)

    def queue(run) -> str:
        state = DagNodeState.objects.get(run=run, node_id="a")
        return TaskExecution.platform.get(id=state.execution_id).queue

    assert (queue(first), queue(second)) == ("normal", "bulk")


def test_editing_an_inline_nodes_task_on_its_own_is_refused_and_changes_nothing(api, tenant):
    dag = dag_create(tenant=tenant, raw={"dag": "hidden", "tasks": [{"id": "a", "handler": NOOP}]})
    task_id = node_tasks_of_version(dag.versions.get().id)["a"]
    before = TaskDefinition.platform.get(id=task_id)
    response = api.patch(f"/api/v1/tasks/{task_id}", {"priority": 9}, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["field"] == "task"
    after = TaskDefinition.platform.get(id=task_id)
    assert (after.priority, after.changed_at) == (before.priority, before.changed_at)
