"""The Runs page and its selectors: filters, search, time windows, cursor paging, counts, and
the tenant wall (another tenant's ids in a filter show nothing)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskExecution
from scheduler_app.paging import cursor_page
from scheduler_app.selectors import run_search
from tests.dashboard.conftest import add_execution, make_dag, make_dag_run
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _ids(response) -> list[str]:
    return re.findall(r'data-execution-id="([0-9a-f-]+)"', response.content.decode())


def test_cursor_pages_walk_every_run_once_newest_first(tenant):
    task, other = make_task(tenant, name="many"), make_task(tenant, name="twin")
    made = [add_execution(task, minutes_ago=i, status=ExecutionStatus.SUCCESS) for i in range(22)]
    # Two runs at the very same instant: the id breaks the tie, neither is skipped or repeated.
    twin = add_execution(other, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    TaskExecution.platform.filter(id=twin.id).update(
        scheduled_at=TaskExecution.platform.get(id=made[9].id).scheduled_at
    )
    made.append(twin)
    rows = run_search.execution_search(tenant=tenant, filters={"window": "all"})
    seen, cursor = [], None
    while True:
        page = cursor_page(rows, cursor=cursor, size=10)
        assert page.total == 23
        seen += [e.id for e in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == 23 and set(seen) == {e.id for e in made}
    times = [TaskExecution.platform.get(id=i).scheduled_at for i in seen]
    assert times == sorted(times, reverse=True)


def test_a_cursor_not_given_out_is_refused_naming_the_field(tenant):
    rows = run_search.execution_search(tenant=tenant, filters={})
    with pytest.raises(ValidationFailed) as raised:
        cursor_page(rows, cursor="not-a-cursor", size=10)
    assert raised.value.field == "cursor"


def test_filters_status_trigger_tag_worker_window_and_search(tenant):
    tagged = make_task(tenant, name="report-export", tags=["reports"])
    other = make_task(tenant, name="cleanup")
    ok = add_execution(tagged, minutes_ago=5, status=ExecutionStatus.SUCCESS)
    failed = add_execution(tagged, minutes_ago=6, status=ExecutionStatus.FAILED, error_class="x")
    old = add_execution(other, minutes_ago=60 * 30, status=ExecutionStatus.SUCCESS)
    TaskExecution.platform.filter(id=failed.id).update(worker_id="celery@blue-7")

    def found(**filters):
        return set(run_search.execution_search(tenant=tenant, filters=filters))

    assert found(window="24h") == {ok, failed}
    assert found(window="7d") == {ok, failed, old}
    assert found(window="all", status="failed") == {failed}
    assert found(window="all", tag="reports") == {ok, failed}
    assert found(window="all", worker="blue") == {failed}
    assert found(window="all", task="cleanup") == {old}
    assert found(window="all", task=str(tagged.id)) == {ok, failed}
    assert found(window="all", q="export") == {ok, failed}
    assert found(window="all", q="boom (x)") == {failed}  # the error text
    assert found(window="all", q=str(old.id)[:8]) == {old}  # the short id the pages show
    assert found(window="all", trigger="manual") == set()
    since = (timezone.now() - timedelta(hours=40)).strftime("%Y-%m-%dT%H:%M")
    until = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert found(window="custom", since=since, until=until) == {old}


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"status": "exploded"}, "status"),
        ({"trigger": "telepathy"}, "trigger"),
        ({"window": "fortnight"}, "window"),
        ({"window": "custom", "since": "yesterday"}, "since"),
    ],
)
def test_bad_filters_name_their_field(tenant, filters, field):
    with pytest.raises(ValidationFailed) as raised:
        run_search.execution_search(tenant=tenant, filters=filters)
    assert raised.value.field == field


def test_runs_page_counts_pages_and_says_what_is_wrong(signed_in, tenant):
    task = make_task(tenant, name="paged")
    for i in range(60):
        add_execution(task, minutes_ago=i, status=ExecutionStatus.SUCCESS)
    first = signed_in.get("/dashboard/runs?window=all")
    assert first.status_code == 200
    text = first.content.decode()
    assert "60 task runs match" in text
    assert len(_ids(first)) == 50
    next_url = re.search(r'id="page-next" href="([^"]+)"', text).group(1).replace("&amp;", "&")
    second = signed_in.get("/dashboard/runs" + next_url)
    assert len(_ids(second)) == 10
    assert not set(_ids(first)) & set(_ids(second))
    assert 'id="page-next"' not in second.content.decode()

    bad = signed_in.get("/dashboard/runs?status=exploded")
    assert bad.status_code == 400
    assert "status: status must be one of" in bad.content.decode()


def test_another_tenants_ids_in_a_runs_filter_show_nothing(signed_in, tenant, tenant_factory):
    """The attacker (acme's admin) names the victim's task, DAG and run ids in the filters."""
    victim, _ = tenant_factory("victim")
    secret_task = make_task(victim, name="victim-payroll")
    secret_run = add_execution(secret_task, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    victim_dag = make_dag(victim)
    victim_dag_run = make_dag_run(victim_dag)
    make_task(tenant, name="mine")
    for query in (
        f"task={secret_task.id}",
        "task=victim-payroll",
        f"q={secret_run.id}",
        f"q={str(secret_run.id)[:8]}",
        f"dag={victim_dag.id}",
        "q=victim-payroll",
    ):
        response = signed_in.get(f"/dashboard/runs?window=all&{query}")
        assert response.status_code == 200, query
        found = response.content.decode().split('id="runs-count"')[1]  # the echoed filter aside
        assert "0 task runs match" in found, query
        assert "victim" not in found and str(secret_run.id) not in found, query
    for query in (f"dag={victim_dag.id}", f"q={victim_dag_run.id}", "q=etl"):
        page = signed_in.get(f"/dashboard/runs?kind=dags&window=all&{query}").content.decode()
        found = page.split('id="runs-count"')[1]
        assert "0 DAG runs match" in found, query
        assert str(victim_dag_run.id) not in found, query


def test_dag_runs_and_node_executions_are_found_and_named_by_their_dag(signed_in, tenant):
    dag = make_dag(tenant)
    run = make_dag_run(dag)
    make_task(tenant, name="unrelated")
    page = signed_in.get(f"/dashboard/runs?kind=dags&window=all&dag={dag.name}").content.decode()
    assert "1 DAG run match" in page and f"/dashboard/dags/{dag.id}/runs/{run.id}" in page
    nodes = signed_in.get(f"/dashboard/runs?window=all&dag={dag.id}")
    text = nodes.content.decode()
    assert "4 task runs match" in text  # the nodes dispatched: a, b, d, e
    # DAG, run, node: linked to the run, never to the hidden task.
    run_link = f'<a href="/dashboard/dags/{dag.id}/runs/{run.id}">run {str(run.id)[:8]}</a>'
    assert f"etl-pipeline</a> › {run_link} › b" in text
    assert "/dashboard/tasks/" not in text.split('id="runs"')[1]


def test_overview_history_and_dlq_show_counts_and_link_to_every_row(signed_in, tenant):
    for i in range(25):
        make_task(tenant, name=f"task-{i:02d}")
    task = make_task(tenant, name="busy")
    for i in range(30):
        add_execution(task, minutes_ago=i, status=ExecutionStatus.SUCCESS)
    overview = signed_in.get("/dashboard/").content.decode()
    assert 'id="task-count">26<' in overview and "all 26 tasks" in overview
    assert 'href="/dashboard/runs"' in overview
    tasks = signed_in.get("/dashboard/tasks?page=2").content.decode()
    assert "26 tasks" in tasks and "page 2 of 1" not in tasks
    history = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert 'id="history-count">30<' in history
    assert f"/dashboard/runs?task={task.id}&amp;window=all" in history
