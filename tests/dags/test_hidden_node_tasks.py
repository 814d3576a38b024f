"""The hidden task definitions of inline DAG nodes stay out of task lists and counts; they are
still reached through their DAG."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dags.models import DagVersion
from dags.services.definitions import dag_create
from scheduler_app.models import TaskDefinition
from scheduler_app.monitoring.stats import overview
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


@pytest.fixture
def dag_with_inline_nodes(tenant):
    make_task(tenant, name="user-task", schedule={"type": "manual"})
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "pipeline",
            "tasks": [
                {"id": "extract", "handler": NOOP},
                {"id": "load", "handler": NOOP, "depends_on": ["extract"]},
            ],
        },
    )
    node_tasks = DagVersion.objects.get(dag=dag, number=1).node_tasks
    assert TaskDefinition.platform.filter(id__in=node_tasks.values()).count() == 2
    return dag, node_tasks


def test_the_task_api_lists_no_dag_node_tasks(api, dag_with_inline_nodes):
    _, node_tasks = dag_with_inline_nodes
    listed = api.get("/api/v1/tasks").json()
    assert [task["name"] for task in listed["results"]] == ["user-task"]
    assert listed["count"] == 1
    # Not even when asked for their tag or their name.
    assert api.get("/api/v1/tasks?tag=dag-node").json()["count"] == 0
    assert api.get("/api/v1/tasks?search=dag:").json()["count"] == 0
    # Reachable through the DAG: its version names them, and they open by id.
    for task_id in node_tasks.values():
        assert api.get(f"/api/v1/tasks/{task_id}").status_code == 200


def test_dashboard_overview_lists_and_counts_only_user_tasks(
    tenant_and_user, dag_with_inline_nodes
):
    tenant, user = tenant_and_user
    assert overview(tenant=tenant)["tasks"] == 1
    client = Client()
    assert client.login(username=user.username, password="pw-123456")
    page = client.get("/dashboard/").content.decode()
    assert "user-task" in page
    assert "dag:pipeline/" not in page


def test_admin_task_list_hides_dag_node_tasks_unless_asked(client, dag_with_inline_nodes):
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(root)
    default = client.get("/admin/scheduler_app/taskdefinition/").content.decode()
    assert "user-task" in default and "dag:pipeline/" not in default
    shown = client.get("/admin/scheduler_app/taskdefinition/?dag_nodes=show").content.decode()
    assert "user-task" in shown and "dag:pipeline/extract" in shown
    only = client.get("/admin/scheduler_app/taskdefinition/?dag_nodes=only").content.decode()
    assert "user-task" not in only and "dag:pipeline/load" in only
