"""The run page's Re-run and "Re-run with parameters…", and the DAG run page's node actions,
through the Django client: what an operator sees and gets, what a viewer and another tenant
are refused (and that nothing changed), bad input said on the page with nothing run."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.utils import timezone

from dags.models import DagNodeState, DagRun
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import AuditEntry, TaskExecution
from tests.api_clients import PASSWORD
from tests.dashboard.conftest import ENDED_RUN_STATES, add_execution, make_dag, make_dag_run
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _member(tenant, role: str) -> Client:
    from django.contrib.auth import get_user_model

    from scheduler_app.services.tenants import membership_set

    user = get_user_model().objects.create_user(username=f"{tenant.slug}-{role}", password=PASSWORD)
    membership_set(tenant=tenant, user=user, role=role)
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def failed_run(tenant):
    task = make_task(tenant, name="nightly-report")
    run = add_execution(task, minutes_ago=2, status=ExecutionStatus.FAILED, error_class="boom")
    TaskExecution.platform.filter(id=run.id).update(parameters={"day": "2026-12-01"})
    return run


def _reruns(run) -> list[TaskExecution]:
    return list(TaskExecution.platform.filter(retry_of_id=run.id, trigger="rerun"))


def _messages(response) -> str:
    return " ".join(str(m) for m in response.context["messages"]) if response.context else ""


def test_an_ended_runs_page_offers_rerun_prefilled_with_its_parameters(signed_in, failed_run):
    page = signed_in.get(f"/dashboard/executions/{failed_run.id}").content.decode()
    assert 'id="btn-rerun"' in page and "Re-run with parameters…" in page
    assert "&quot;day&quot;: &quot;2026-12-01&quot;" in page  # the textarea, escaped


def test_a_running_runs_page_offers_no_rerun(signed_in, tenant):
    running = add_execution(make_task(tenant), minutes_ago=0, status=ExecutionStatus.RUNNING)
    page = signed_in.get(f"/dashboard/executions/{running.id}").content.decode()
    assert 'id="btn-rerun"' not in page


def test_rerun_makes_a_new_run_and_opens_it(signed_in, failed_run):
    response = signed_in.post(
        f"/dashboard/executions/{failed_run.id}/rerun", {"note": "flaky"}, follow=True
    )
    (rerun,) = _reruns(failed_run)
    assert response.redirect_chain[-1][0] == f"/dashboard/executions/{rerun.id}"
    assert rerun.parameters == {"day": "2026-12-01"}
    assert "Re-running nightly-report" in _messages(response)
    # The new run's page links back to the run it re-ran.
    assert f'id="rerun-of" href="/dashboard/executions/{failed_run.id}"' in (
        response.content.decode()
    )
    entry = AuditEntry.platform.get(action="execution.rerun")
    assert entry.detail["reason"] == "flaky" and entry.actor.startswith("user:")


def test_rerun_with_edited_parameters(signed_in, failed_run):
    signed_in.post(
        f"/dashboard/executions/{failed_run.id}/rerun",
        {"parameters": json.dumps({"day": "2026-12-02", "force": True}), "note": ""},
    )
    (rerun,) = _reruns(failed_run)
    assert rerun.parameters == {"day": "2026-12-02", "force": True}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"day": ', "not valid JSON"),
        ('["a", "list"]', "must be a JSON object"),
        ('{"token": "{{secret:db}}"}', "secret"),
    ],
)
def test_bad_parameters_are_said_on_the_page_and_nothing_runs(signed_in, failed_run, text, said):
    response = signed_in.post(
        f"/dashboard/executions/{failed_run.id}/rerun", {"parameters": text}, follow=True
    )
    assert response.redirect_chain[-1][0] == f"/dashboard/executions/{failed_run.id}"
    assert "Nothing was re-run" in _messages(response) and said in _messages(response)
    assert _reruns(failed_run) == []


def test_a_viewer_sees_no_rerun_and_is_refused(tenant, failed_run):
    viewer = _member(tenant, "viewer")
    page = viewer.get(f"/dashboard/executions/{failed_run.id}").content.decode()
    assert 'id="btn-rerun"' not in page
    response = viewer.post(f"/dashboard/executions/{failed_run.id}/rerun", {})
    assert response.status_code == 403
    assert _reruns(failed_run) == []


def test_another_tenant_cannot_rerun(tenant_factory, failed_run):
    other, _ = tenant_factory("globex")
    intruder = _member(other, "operator")
    assert intruder.post(f"/dashboard/executions/{failed_run.id}/rerun", {}).status_code == 404
    assert _reruns(failed_run) == []


@pytest.fixture
def ended_dag_run(tenant):
    dag = make_dag(tenant)
    run = make_dag_run(dag, ENDED_RUN_STATES)
    DagRun.platform.filter(id=run.id).update(status="failed", completed_at=timezone.now())
    return dag, run


def _node(run, node_id) -> DagNodeState:
    return DagNodeState.objects.get(run=run, node_id=node_id)


def test_the_dag_run_page_offers_node_actions_once_ended(signed_in, ended_dag_run):
    dag, run = ended_dag_run
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'id="node-actions-title"' in page
    for action in ("clear", "clear-upstream", "clear-downstream", "mark-succeeded"):
        assert f"/operate/b/{action}" in page
    assert "/operate/b/mark-failed" not in page  # b failed already
    assert "/operate/a/mark-succeeded" not in page  # a succeeded already


def test_clear_with_downstream_from_the_page(signed_in, ended_dag_run):
    dag, run = ended_dag_run
    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/b/clear-downstream",
        {"note": "retry after the fix"},
        follow=True,
    )
    assert "Cleared b, c: the run is running again." in _messages(response)
    assert DagRun.platform.get(id=run.id).status == "running"
    assert (_node(run, "b").attempt_trigger, _node(run, "c").status) == ("clear", "waiting")
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert "cleared · user:" in page  # the attempts table says who cleared it
    entry = AuditEntry.platform.get(action="dag_node.clear")
    assert entry.detail["reason"] == "retry after the fix" and entry.detail["node_id"] == "b"
    # Running now: a second clear is refused with the reason, and nothing changes.
    again = signed_in.post(
        f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/a/clear", {}, follow=True
    )
    assert "Nothing was changed: the DAG run is still running" in _messages(again)
    assert _node(run, "a").attempt_number == 1


def test_a_running_runs_page_offers_only_marking_its_in_flight_nodes(
    signed_in, tenant, django_capture_on_commit_callbacks
):
    from dags.services.runs import dag_trigger

    noop = {"type": "python", "callable": "noop"}
    dag = make_dag(
        tenant,
        {
            "dag": "pair",
            "tasks": [
                {"id": "first", "handler": noop},
                {"id": "then", "handler": noop, "depends_on": ["first"]},
            ],
        },
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = dag_trigger(dag=dag)  # first is queued, then waits for it
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert "/operate/first/mark-succeeded" in page and "/operate/first/mark-failed" in page
    assert "/operate/first/clear" not in page and "/operate/then/" not in page
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(
            f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/first/mark-succeeded",
            {"note": "it hung"},
            follow=True,
        )
    assert "Marked first succeeded." in _messages(response)
    assert _node(run, "first").status == "success"
    assert _node(run, "then").status == "queued"  # it follows from it


def test_mark_succeeded_from_the_page(signed_in, ended_dag_run):
    dag, run = ended_dag_run
    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/b/mark-succeeded",
        {"note": "done by hand"},
        follow=True,
    )
    assert "Marked b succeeded. c will follow from it." in _messages(response)
    assert (_node(run, "b").status, _node(run, "b").attempt_trigger) == ("success", "mark")
    assert _node(run, "c").status in ("pending", "queued")


def test_a_viewer_cannot_clear_or_mark_and_nothing_changes(tenant, ended_dag_run):
    dag, run = ended_dag_run
    viewer = _member(tenant, "viewer")
    page = viewer.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert "/operate/" not in page
    before = list(DagNodeState.objects.filter(run=run).values_list("node_id", "status"))
    for action in ("clear", "clear-downstream", "mark-succeeded", "mark-failed"):
        response = viewer.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/b/{action}", {})
        assert response.status_code == 403
    assert list(DagNodeState.objects.filter(run=run).values_list("node_id", "status")) == before
    assert DagRun.platform.get(id=run.id).status == "failed"


def test_another_tenant_cannot_clear_or_mark(tenant_factory, ended_dag_run):
    dag, run = ended_dag_run
    other, _ = tenant_factory("globex")
    intruder = _member(other, "operator")
    for action in ("clear-downstream", "mark-succeeded"):
        response = intruder.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/operate/b/{action}", {})
        assert response.status_code == 404
    assert _node(run, "b").status == "failed" and _node(run, "b").attempt_number == 1
