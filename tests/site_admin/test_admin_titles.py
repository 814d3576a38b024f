"""What the admin's pages say: model titles in the words people use ("DAGs", "DAG runs"), an
execution titled by its task, fire time, status and short id, a DAG node's task as
"dag > node (v1)", read-only statistics without "Delete selected", and a bulk dead-letter
refusal that names the run it refused."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from dags.models import DagNodeExecution, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from data_lifecycle.models import TaskStats
from runs.finish import run_finish
from scheduler_app.models import TaskExecution
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from scheduler_app.task_names import task_display_name
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_dag_node_task_names_read_as_dag_node_and_version():
    assert (
        task_display_name("dag:fan-out-example/merge@v1-927958") == "fan-out-example › merge (v1)"
    )
    assert task_display_name("dag:team/etl/load@v12-0a1b2c") == "team/etl › load (v12)"
    # Anything else, and a name cut short at 255 characters, reads as it is.
    assert task_display_name("nightly-report") == "nightly-report"
    assert task_display_name("dag:x/y@v1-92") == "dag:x/y@v1-92"


def test_the_index_titles_dags_and_their_runs_in_capitals(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    assert ">DAGs<" in page and ">DAG runs<" in page
    assert ">Dags<" not in page and ">Dag runs<" not in page
    assert ">Task stats<" in page and "statss" not in page
    changelist = staff_client.get(reverse("admin:dags_dag_changelist")).content.decode()
    assert "Select DAG to change" in changelist


def _failed_run(task) -> TaskExecution:
    execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id, claim_token=claim.claim_token, outcome=Outcome(status="failed")
    )
    execution.refresh_from_db()
    return execution


def test_an_execution_is_titled_by_its_task_fire_time_status_and_short_id(staff_client, tenant):
    task = make_task(
        tenant, name="nightly-report", schedule={"type": "manual"}, retry_policy={"max_attempts": 1}
    )
    execution = _failed_run(task)
    page = staff_client.get(
        reverse("admin:scheduler_app_taskexecution_change", args=[execution.id])
    ).content.decode()
    fired = execution.scheduled_at.strftime("%Y-%m-%d %H:%M:%S")
    title = f"nightly-report · {fired} UTC · failed · {str(execution.id)[:8]}"
    head = page.split("<title>")[1].split("</title>")[0]
    assert title in head and str(task.id) not in head
    assert f"<h2>{title}</h2>" in page


def _dag_with_a_failing_node(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "fan-out-example",
            "tasks": [
                {
                    "id": "merge",
                    "handler": {"type": "python", "callable": "noop"},
                    "retry_policy": {"max_attempts": 1},
                },
                {"id": "side", "handler": {"type": "python", "callable": "noop"}},
            ],
        },
    )
    run = dag_trigger(dag=dag)
    link = DagNodeExecution.objects.get(run=run, node_id="merge")
    execution = TaskExecution.platform.get(id=link.execution_root_id)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id, claim_token=claim.claim_token, outcome=Outcome(status="failed")
    )
    execution.refresh_from_db()
    return run, execution


def test_a_dag_nodes_task_reads_as_dag_and_node_in_the_admin(staff_client, tenant):
    _, execution = _dag_with_a_failing_node(tenant)
    listing = staff_client.get(
        reverse("admin:scheduler_app_taskexecution_changelist"), {"q": str(execution.id)}
    ).content.decode()
    assert "fan-out-example › merge (v1)" in listing
    assert "dag:fan-out-example/merge@v1-" not in listing


def test_a_bulk_dead_letter_refusal_names_the_run_it_refused(staff_client, tenant):
    run, execution = _dag_with_a_failing_node(tenant)
    assert execution.dead_lettered
    assert DagRun.platform.get(id=run.id).status == "running"  # "side" has not run
    response = staff_client.post(
        reverse("admin:scheduler_app_taskexecution_changelist"),
        {"action": "retry_dead_lettered", "_selected_action": [str(execution.id)]},
        follow=True,
    )
    page = response.content.decode()
    refusal = next(line for line in page.splitlines() if "Not retried" in line)
    # The execution by its name and short id; the run it waits for by its own short id.
    assert "fan-out-example › merge (v1) · " in refusal
    assert str(execution.id)[:8] in refusal
    assert f"its DAG run {str(run.id)[:8]} is running" in refusal
    assert "this one is" not in refusal
    execution.refresh_from_db()
    assert execution.dead_lettered  # nothing changed


def test_read_only_statistics_offer_no_delete(staff_client, tenant):
    now = timezone.now()
    TaskStats.objects.create(
        tenant_id=tenant.id, bucket="hour", bucket_start=now, total=3, refreshed_at=now
    )
    page = staff_client.get(reverse("admin:data_lifecycle_taskstats_changelist")).content.decode()
    assert "1 task stats" in page  # the row is listed, so the actions would show
    assert "delete_selected" not in page and "Delete selected" not in page
    assert staff_client.get(reverse("admin:data_lifecycle_dagstats_changelist")).status_code == 200
    assert TaskStats._meta.verbose_name_plural == "task stats"


def test_incidents_read_in_words_in_the_admin(staff_client, tenant):
    from alerting.services.incidents import incident_open

    incident = incident_open(
        rule="error_rate_high", key=str(tenant.id), tenant=tenant, summary="19.0% of 40 runs failed"
    )
    page = staff_client.get(reverse("admin:alerting_alertincident_changelist")).content.decode()
    assert "Error rate high" in page and "19.0% of 40 runs failed" in page
    change = staff_client.get(
        reverse("admin:alerting_alertincident_change", args=[incident.id])
    ).content.decode()
    assert "error_rate_high: 19.0% of 40 runs failed" in change
