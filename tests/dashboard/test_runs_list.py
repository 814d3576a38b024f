"""The Runs page as an operator reads it on the second day: start time, duration and queue
wait columns, times in the viewer's zone (UTC without script), a search of the tenant's logs
from the list with the lines that matched, and states that say what they are: no "took" for
a run that has not ended, no "cancelled cancelled", a failed DAG run naming what failed."""

from __future__ import annotations

import re
from datetime import UTC, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.monitoring import stats
from scheduler_app.selectors import log_search_budget
from scheduler_app.services.tenants import membership_set
from tests.dashboard.conftest import ENDED_RUN_STATES, add_execution, make_dag, make_dag_run
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _row(page: str, execution_id) -> str:
    match = re.search(rf'<tr data-execution-id="{execution_id}">(.*?)</tr>', page, re.S)
    assert match, f"no row for {execution_id}"
    return match.group(1)


def _cell(row: str, label: str) -> str:
    match = re.search(rf'<td data-label="{label}"[^>]*>(.*?)</td>', row, re.S)
    assert match, f"no {label} cell in {row}"
    return match.group(1)


def _member(tenant, role: str, username: str) -> Client:
    user = get_user_model().objects.create_user(username=username, password="pw-123456")
    membership_set(tenant=tenant, user=user, role=role)
    client = Client()
    assert client.login(username=username, password="pw-123456")
    return client


def test_the_list_shows_start_duration_and_queue_wait_with_times_as_time_elements(
    signed_in, tenant
):
    task = make_task(tenant, name="nightly-export")
    run = add_execution(task, minutes_ago=10, status=ExecutionStatus.SUCCESS, lag=4.0, duration=2.5)
    # Published 1.5 s after its time: the queue wait counts from then, not from the due time.
    TaskExecution.platform.filter(id=run.id).update(
        queued_at=run.scheduled_at + timedelta(seconds=1.5)
    )
    run.refresh_from_db()
    row = _row(signed_in.get("/dashboard/runs").content.decode(), run.id)
    started = run.started_at.astimezone(UTC)
    iso = started.isoformat().replace("+00:00", "Z")
    shown = started.strftime("%Y-%m-%d %H:%M:%S")
    assert _cell(row, "started") == (
        f'<time datetime="{iso}" data-local="datetime" title="{shown} UTC">{shown} UTC</time>'
    )
    assert "<time datetime=" in _cell(row, "scheduled")
    assert _cell(row, "duration") == "2.5 s"
    assert _cell(row, "queue wait") == "2.5 s"  # started 4 s after due, 2.5 s after queued


def test_a_running_run_says_running_for_and_never_took_and_is_not_on_the_duration_chart(
    signed_in, tenant
):
    task = make_task(tenant, name="long-haul")
    done = add_execution(task, minutes_ago=5, status=ExecutionStatus.SUCCESS, duration=0.096)
    running = add_execution(task, minutes_ago=1, status=ExecutionStatus.RUNNING)
    queued = add_execution(task, minutes_ago=0.5, status=ExecutionStatus.QUEUED)
    page = signed_in.get("/dashboard/runs").content.decode()
    assert _cell(_row(page, done.id), "duration") == "96 ms"
    elapsed = _cell(_row(page, running.id), "duration")
    assert elapsed.startswith('<span class="elapsed" data-running-since="')
    assert "running for " in elapsed and "96 ms" not in elapsed
    assert _cell(_row(page, queued.id), "duration") == "waiting to start"

    run_page = signed_in.get(f"/dashboard/executions/{running.id}").content.decode()
    duration = re.search(r'id="execution-duration">(.*?)</span></span>', run_page, re.S).group(1)
    assert "running for " in duration and "took" not in duration
    finished_page = signed_in.get(f"/dashboard/executions/{done.id}").content.decode()
    assert 'id="execution-duration">took 96 ms<' in finished_page

    task_page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    last_run = re.search(r'id="task-last-run">(.*?)</td>', task_page, re.S).group(1)
    assert "took" not in last_run and "waiting to start" in last_run  # the queued one is last
    assert "<time datetime=" in last_run
    history_row = _row(task_page, running.id)
    assert "running for " in _cell(history_row, "duration")
    assert "<time datetime=" in _cell(history_row, "scheduled")

    chart = stats.task_trend(tenant=tenant, task=task)
    assert [point["id"] for point in chart] == [str(done.id)]


def test_a_cancelled_run_says_cancelled_once(signed_in, tenant):
    task = make_task(tenant, name="cancel-me")
    run = add_execution(task, minutes_ago=2, status=ExecutionStatus.CANCELLED, error_class="x")
    TaskExecution.platform.filter(id=run.id).update(
        error_class="cancelled", error_message="cancelled after 23.0s"
    )
    failed = add_execution(task, minutes_ago=3, status=ExecutionStatus.FAILED, error_class="x")
    TaskExecution.platform.filter(id=failed.id).update(
        error_class="http_error", error_message="503 from upstream"
    )
    page = signed_in.get("/dashboard/runs").content.decode()
    assert _cell(_row(page, run.id), "error") == "cancelled after 23.0 s"
    assert _cell(_row(page, failed.id), "error") == "http_error: 503 from upstream"
    run_page = signed_in.get(f"/dashboard/executions/{run.id}").content.decode()
    assert "cancelled cancelled" not in run_page.lower()
    assert "cancelled after 23.0 s" in run_page


def test_a_partially_completed_dag_run_names_what_failed_and_what_never_ran(signed_in, tenant):
    dag = make_dag(tenant)
    run = make_dag_run(dag, ENDED_RUN_STATES)
    type(run).platform.filter(id=run.id).update(status="partially_completed")
    said = "b failed, c not run"
    dags_list = signed_in.get("/dashboard/runs", {"kind": "dags"}).content.decode()
    row = re.search(rf'<tr data-run-id="{run.id}">(.*?)</tr>', dags_list, re.S).group(1)
    assert "Partially completed" in row and f'<span class="outcome">{said}</span>' in row
    dag_page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert f'<span class="outcome">{said}</span>' in dag_page
    run_page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert f'id="run-outcome" class="outcome">{said}</span>' in run_page
    # The node that never ran is labelled so wherever its state shows.
    assert "Not run (upstream failed)" in run_page


def test_fifty_rows_cost_the_same_queries_as_five(signed_in, tenant):
    def queries_for(rows: int) -> int:
        TaskExecution.platform.filter(tenant=tenant).delete()
        task = make_task(tenant, name=f"counted-{rows}")
        for i in range(rows):
            add_execution(task, minutes_ago=i + 1, status=ExecutionStatus.SUCCESS)
        with CaptureQueriesContext(connection) as captured:
            response = signed_in.get("/dashboard/runs")
        assert response.content.decode().count("<tr data-execution-id=") == rows
        return len(captured.captured_queries)

    assert queries_for(50) == queries_for(5)


def _logged(task, *, minutes_ago: float, text: str):
    run = add_execution(task, minutes_ago=minutes_ago, status=ExecutionStatus.SUCCESS)
    ExecutionLog.objects.create(execution_id=run.id, tenant_id=task.tenant_id, text=text)
    return run


def test_log_search_finds_runs_by_a_line_they_printed_and_marks_it(signed_in, tenant):
    task = make_task(tenant, name="loader")
    hit = _logged(task, minutes_ago=3, text="starting\nupstream said ECONNREFUSED on 10.0.0.7\nok")
    _logged(task, minutes_ago=4, text="starting\nall fine\nok")
    response = signed_in.get("/dashboard/runs", {"q": "ECONNREFUSED", "search_in": "logs"})
    assert response.status_code == 200
    page = response.content.decode()
    assert re.findall(r'<tr data-execution-id="([0-9a-f-]+)"', page) == [str(hit.id)]
    lines = _cell(_row(page, hit.id), "matching log lines")
    marked = "upstream said <mark>ECONNREFUSED</mark> on 10.0.0.7"
    assert f'<code class="log-hit">{marked}</code>' in lines
    assert "starting" not in lines
    assert 'whose log has <q id="log-words">ECONNREFUSED</q>' in page
    # A search's answer does not poll: each refresh would spend another search of the budget.
    assert 'data-live-final="a log search, as of when it ran"' in page
    assert "data-live-final" not in signed_in.get("/dashboard/runs").content.decode()

    none = signed_in.get("/dashboard/runs", {"q": "nosuchword", "search_in": "logs"})
    assert none.status_code == 200
    assert "No task run's log has these words" in none.content.decode()


def test_log_search_pages_newest_first_by_cursor(signed_in, tenant, monkeypatch):
    monkeypatch.setattr("dashboard.runs.PAGE_SIZE", 2)
    task = make_task(tenant, name="paged")
    made = [_logged(task, minutes_ago=i + 1, text=f"line {i} needle") for i in range(5)]
    seen, query = [], {"q": "needle", "search_in": "logs"}
    while True:
        page = signed_in.get("/dashboard/runs", query).content.decode()
        seen += re.findall(r'<tr data-execution-id="([0-9a-f-]+)"', page)
        cursor = re.search(r'id="page-next" href="\?[^"]*cursor=([^"&]+)', page)
        if not cursor:
            break
        query = {**query, "cursor": cursor.group(1)}
    assert seen == [str(run.id) for run in made]


def test_another_tenants_logs_never_appear_and_a_viewer_may_search(tenant, tenant_factory):
    """The attacker is a viewer of globex searching for a word only acme's logs hold, and for a
    word both hold: they see their own run, never acme's, its lines or its id."""
    acme_task = make_task(tenant, name="acme-billing")
    secret = _logged(acme_task, minutes_ago=2, text="card 4242 declined\nshared-word")
    globex, _ = tenant_factory("globex")
    theirs = _logged(make_task(globex, name="globex-job"), minutes_ago=2, text="shared-word here")
    attacker = _member(globex, "viewer", "globex-viewer")

    only_acme = attacker.get("/dashboard/runs", {"q": "declined", "search_in": "logs"})
    assert only_acme.status_code == 200
    body = only_acme.content.decode()
    assert "<tr data-execution-id=" not in body
    assert str(secret.id) not in body and "4242" not in body

    both = attacker.get(
        "/dashboard/runs", {"q": "shared-word", "search_in": "logs", "window": "all"}
    ).content.decode()
    assert re.findall(r'<tr data-execution-id="([0-9a-f-]+)"', both) == [str(theirs.id)]
    assert str(secret.id) not in both and "acme-billing" not in both
    # A filter naming acme's task by id finds nothing either.
    by_task = attacker.get(
        "/dashboard/runs", {"q": "shared-word", "search_in": "logs", "task": str(acme_task.id)}
    ).content.decode()
    assert "<tr data-execution-id=" not in by_task


def test_bad_log_search_words_are_a_400_naming_the_field(signed_in, tenant):
    empty = signed_in.get("/dashboard/runs", {"q": "", "search_in": "logs"})
    assert empty.status_code == 400 and 'id="runs-error"' in empty.content.decode()
    long = signed_in.get("/dashboard/runs", {"q": "x" * 201, "search_in": "logs"})
    assert long.status_code == 400
    assert "log_contains: log_contains must be 1 to 200 characters" in long.content.decode()


def test_log_search_from_the_list_shares_the_tenants_cap_on_searches_at_once(signed_in, tenant):
    in_flight = [log_search_budget.log_search_place_take(tenant_id=tenant.id) for _ in range(4)]
    try:
        refused = signed_in.get("/dashboard/runs", {"q": "needle", "search_in": "logs"})
        assert refused.status_code == 429
        assert refused.has_header("Retry-After")
        assert "already runs 4 log searches at once" in refused.content.decode()
        assert "<tr data-execution-id=" not in refused.content.decode()
        # A plain runs search is no log search: it is not refused.
        assert signed_in.get("/dashboard/runs", {"q": "needle"}).status_code == 200
    finally:
        for place in in_flight:
            log_search_budget.log_search_place_give_back(place)
    assert signed_in.get("/dashboard/runs", {"q": "needle", "search_in": "logs"}).status_code == 200


def test_a_matched_log_line_is_shown_as_text_never_as_markup(signed_in, tenant):
    """A run's log is tenant output: a line carrying markup is escaped around the marks."""
    task = make_task(tenant, name="printer")
    run = _logged(task, minutes_ago=1, text="<img src=x onerror=alert(1)> needle </code>")
    page = signed_in.get("/dashboard/runs", {"q": "needle", "search_in": "logs"}).content.decode()
    lines = _cell(_row(page, run.id), "matching log lines")
    assert "<img" not in lines and "&lt;img src=x onerror=alert(1)&gt; <mark>needle</mark>" in lines
    assert lines.count("</code>") == 1
