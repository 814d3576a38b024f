"""The dead-letter page's filter, selection and bulk actions, and the API's retry-all with the
same filters (one service, `runs.dead_letters`): each item's outcome is reported, naming it;
a viewer and an operator are refused what the API refuses them, another tenant's ids are not
found, and a refusal changes nothing (real PostgreSQL, the Django client)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import AuditEntry, TaskExecution
from tests.api_clients import PASSWORD, member_client
from tests.dashboard.conftest import add_execution, make_dag, make_dag_run
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


def _dead(task, error_class: str, *, hours_ago: float = 0) -> TaskExecution:
    execution = add_execution(
        task, minutes_ago=5, status=ExecutionStatus.FAILED, error_class=error_class
    )
    TaskExecution.platform.filter(id=execution.id).update(
        dead_lettered=True, dead_lettered_at=timezone.now() - timedelta(hours=hours_ago)
    )
    return execution


@pytest.fixture
def queue(tenant):
    report, sync = make_task(tenant, name="nightly-report"), make_task(tenant, name="crm-sync")
    return {
        "report_old": _dead(report, "timeout", hours_ago=30),
        "report_new": _dead(report, "http_5xx"),
        "sync": _dead(sync, "http_5xx"),
    }


def _dead_ids() -> set[str]:
    dead = TaskExecution.platform.filter(dead_lettered=True)
    return {str(i) for i in dead.values_list("id", flat=True)}


def _report(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_the_filter_narrows_the_page_by_task_error_and_since(signed_in, queue):
    def rows(query: str) -> set[str]:
        page = signed_in.get(f"/dashboard/dlq?{query}").content.decode()
        return {name for name, e in queue.items() if f'data-execution-id="{e.id}"' in page}

    assert rows("") == set(queue)
    assert rows("task=nightly") == {"report_old", "report_new"}
    assert rows("error=5xx") == {"report_new", "sync"}
    since = (timezone.now() - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    assert rows(f"task=nightly&since={since}") == {"report_new"}
    page = signed_in.get("/dashboard/dlq?since=yesterday").content.decode()
    assert 'id="dlq-filter-problem"' in page and "since must be" in page


def test_retry_selected_reports_each_item(signed_in, queue, tenant_factory):
    other, _ = tenant_factory("globex")
    foreign = _dead(make_task(other, name="their-task"), "boom")
    TaskExecution.platform.filter(id=queue["sync"].id).update(dead_lettered=False)  # handled
    ids = [str(queue["report_new"].id), str(queue["sync"].id), str(foreign.id), "not-an-id"]
    response = signed_in.post("/dashboard/dlq/bulk/retry", {"ids": ids}, follow=True)
    report = _report(response)
    assert "Retry selected 4: 1 already handled, 2 not found, 1 retried." in report
    assert f"nightly-report run {str(queue['report_new'].id)[:8]}: retried" in report
    assert f"crm-sync run {str(queue['sync'].id)[:8]}: no longer in the queue" in report
    assert f"run {foreign.id}: not found in this tenant" in report
    assert "their-task" not in report  # another tenant's run is not named
    assert TaskExecution.platform.get(id=foreign.id).dead_lettered is True
    assert TaskExecution.platform.filter(retry_of_id=queue["report_new"].id).count() == 1
    # One entry per run it changed (found by that run), none for what it did not change.
    entry = AuditEntry.platform.get(action="dlq.retry")
    assert entry.actor == "user:acme-admin" and entry.tenant_id == queue["sync"].tenant_id
    assert entry.object_id == str(queue["report_new"].id)


def test_retry_all_matching_retries_only_what_the_filter_matches(signed_in, queue):
    response = signed_in.post(
        "/dashboard/dlq/bulk/retry-all", {"task": "nightly", "error": "5xx"}, follow=True
    )
    assert "Retry all matching 1: 1 retried." in _report(response)
    assert response.redirect_chain[-1][0] == "/dashboard/dlq?task=nightly&error=5xx"
    assert _dead_ids() == {str(queue["report_old"].id), str(queue["sync"].id)}
    entry = AuditEntry.platform.get(action="dlq.retry")
    assert entry.object_id == str(queue["report_new"].id)


def test_a_dag_nodes_dead_letter_whose_run_is_going_is_refused_and_stays(signed_in, tenant):
    run = make_dag_run(make_dag(tenant))  # b failed, e still running: the run is going
    node_run = TaskExecution.platform.get(id=run.nodes.get(node_id="b").execution_id)
    TaskExecution.platform.filter(id=node_run.id).update(dead_lettered=True)
    response = signed_in.post("/dashboard/dlq/bulk/retry", {"ids": [str(node_run.id)]}, follow=True)
    report = _report(response)
    assert f"etl-pipeline › b run {str(node_run.id)[:8]}: its DAG run" in report
    assert "1 refused" in report
    assert TaskExecution.platform.get(id=node_run.id).dead_lettered is True


def test_delete_selected_is_for_admins(tenant, signed_in, queue):
    ids = [str(queue["report_old"].id)]
    operator = _member(tenant, "operator")
    page = operator.get("/dashboard/dlq").content.decode()
    assert 'id="dlq-retry-selected"' in page and 'id="dlq-delete-selected"' not in page
    assert operator.post("/dashboard/dlq/bulk/delete", {"ids": ids}).status_code == 403
    assert str(queue["report_old"].id) in _dead_ids()
    response = signed_in.post("/dashboard/dlq/bulk/delete", {"ids": ids}, follow=True)  # admin
    assert "Delete selected 1: 1 removed." in _report(response)
    assert AuditEntry.platform.get(action="dlq.delete").object_id == str(queue["report_old"].id)
    assert str(queue["report_old"].id) not in _dead_ids()


def test_a_viewer_sees_no_bulk_actions_and_is_refused_each(tenant, queue):
    viewer = _member(tenant, "viewer")
    page = viewer.get("/dashboard/dlq").content.decode()
    assert "dlq-select" not in page and 'id="dlq-retry-all"' not in page
    before = _dead_ids()
    ids = [str(e.id) for e in queue.values()]
    for action in ("retry", "retry-all", "delete"):
        assert viewer.post(f"/dashboard/dlq/bulk/{action}", {"ids": ids}).status_code == 403
    assert _dead_ids() == before
    assert not TaskExecution.platform.filter(trigger="retry").exists()
    assert not AuditEntry.platform.filter(action__startswith="dlq.").exists()


def test_too_many_ids_are_refused_whole(signed_in, queue):
    ids = [str(queue["sync"].id)] + [f"00000000-0000-0000-0000-{i:012d}" for i in range(500)]
    response = signed_in.post("/dashboard/dlq/bulk/retry", {"ids": ids}, follow=True)
    assert "Nothing was done: at most 500 runs at once" in _report(response)
    assert str(queue["sync"].id) in _dead_ids()


def test_the_api_filters_the_queue_and_retry_all_reports_each_item(api, queue):
    listed = api.get("/api/v1/admin/dlq?error=5xx").json()
    assert {row["id"] for row in listed["results"]} == {
        str(queue["report_new"].id),
        str(queue["sync"].id),
    }
    assert api.get("/api/v1/admin/dlq?since=soon").status_code == 400
    response = api.post("/api/v1/admin/dlq/retry-all?task=crm")
    assert response.status_code == 202
    body = response.json()
    assert body["retried"] == 1
    [item] = body["results"]
    assert (item["execution_id"], item["name"], item["outcome"]) == (
        str(queue["sync"].id),
        "crm-sync",
        "retried",
    )
    assert item["new_execution_id"]
    assert _dead_ids() == {str(queue["report_old"].id), str(queue["report_new"].id)}


def test_a_viewer_cannot_retry_all_through_the_api(tenant, queue):
    viewer, _ = member_client(tenant, "viewer", username="api-viewer")
    assert viewer.post("/api/v1/admin/dlq/retry-all").status_code == 403
    assert len(_dead_ids()) == 3
