"""Log search asks recent windows before the whole history
(`scheduler_app.selectors.log_search_windows`):
every page, and every cursor's next page, is the one the whole-history read gives; old runs
are still found; the windowed query reads the word index by tenant and hour."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.selectors import log_search, log_search_windows
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _runs(tenant, task, *, ago: list[timedelta], text: str) -> list[TaskExecution]:
    """Finished runs scheduled `ago` before now, each with a stored log written a few seconds
    after its time (as a finish writes it)."""
    now = timezone.now()
    runs = [
        TaskExecution(
            id=uuid.uuid4(),
            tenant=tenant,
            task=task,
            status="success",
            trigger="manual",
            queue="normal",
            scheduled_at=now - delta,
            attempt=1,
            max_attempts=1,
        )
        for delta in ago
    ]
    TaskExecution.objects.bulk_create(runs)
    ExecutionLog.objects.bulk_create(
        ExecutionLog(execution_id=run.id, tenant=tenant, text=text) for run in runs
    )
    for run in runs:
        ExecutionLog.platform.filter(execution_id=run.id).update(
            created_at=run.scheduled_at + timedelta(seconds=3)
        )
    return runs


def _pages(api, words: str, **params) -> list[list[str]]:
    pages, response = [], api.get("/api/v1/executions", {"log_contains": words, **params})
    while True:
        assert response.status_code == 200, response.content
        pages.append([e["id"] for e in response.json()["results"]])
        if not response.json()["next"]:
            return pages
        response = api.get(response.json()["next"])


@pytest.fixture
def history(tenant, tenant_factory):
    task = make_task(tenant, name="fetcher", schedule={"type": "manual"})
    minutes = [timedelta(minutes=m) for m in range(1, 60)]  # fills a page within the hour
    return {
        "recent": _runs(tenant, task, ago=minutes, text="fetched rows ok"),
        "last week": _runs(tenant, task, ago=[timedelta(days=7)], text="fetched rows ok"),
        "old": _runs(tenant, task, ago=[timedelta(days=40)], text="upstream ECONNREFUSED"),
        "old few": _runs(
            tenant, task, ago=[timedelta(days=30, hours=h) for h in range(3)], text="rows slow"
        ),
        "few": _runs(tenant, task, ago=[timedelta(hours=2)], text="rows slow"),
    }


@pytest.mark.parametrize(
    "windows", ["every window", "the last hour", None], ids=["ladder", "hour", "whole-history"]
)
def test_every_page_is_the_whole_history_one(api, history, monkeypatch, windows):
    # Words taken as neither few nor common go through the windows (here every window is
    # expected to hold the page, so each is tried in turn); as the planner sees these few
    # logs, they are read from the whole history at once: the pages agree.
    if windows:
        monkeypatch.setattr(
            "scheduler_app.selectors.log_search_windows._middling", lambda tenant, words: True
        )
        monkeypatch.setattr(
            "scheduler_app.selectors.log_search_windows._expected_in_window",
            lambda tenant, words, start: 1e9,
        )
    if windows == "the last hour":
        monkeypatch.setattr(
            "scheduler_app.selectors.log_search_windows.SEARCH_WINDOWS", (timedelta(hours=1),)
        )
    newest_first = sorted(
        history["recent"] + history["last week"], key=lambda r: r.scheduled_at, reverse=True
    )
    ids = [str(r.id) for r in newest_first]
    assert _pages(api, "fetched rows") == [ids[:50], ids[50:]]
    assert _pages(api, "fetched rows", page_size=20) == [ids[:20], ids[20:40], ids[40:]]
    # A page the windows cannot fill: the whole history answers, the old runs included.
    slow = sorted(history["few"] + history["old few"], key=lambda r: r.scheduled_at)
    assert _pages(api, "slow") == [[str(r.id) for r in reversed(slow)]]
    assert _pages(api, "ECONNREFUSED") == [[str(history["old"][0].id)]]
    # Ascending order reads the whole history; its pages are the same runs, oldest first.
    oldest_first = _pages(api, "fetched rows", ordering="scheduled_at")
    assert [i for page in oldest_first for i in page] == list(reversed(ids))


def test_another_tenants_logs_never_answer_through_a_window(api, history, tenant_factory):
    other, _ = tenant_factory("globex")
    theirs = make_task(other, name="theirs", schedule={"type": "manual"})
    _runs(other, theirs, ago=[timedelta(minutes=1)], text="fetched rows ok ECONNREFUSED")
    found = [i for page in _pages(api, "fetched rows ok") for i in page]
    mine = {str(r.id) for r in history["recent"] + history["last week"]}
    assert set(found) == mine


def test_the_windowed_search_reads_the_index_by_tenant_and_hour(tenant):
    # Enough logs of the tenant, every one with the word searched, that the word index would
    # match them all: the tenant's hour window is the selective one. (A word no log has made
    # the word index look cheaper whenever other tests' logs moved the statistics.)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_app_executionlog (execution_id, tenant_id, text, size_bytes,"
            " truncated, created_at) SELECT gen_random_uuid(), %s, 'fetched ' || g || ' rows',"
            " 0, false, now() - g * interval '1 minute' FROM generate_series(1, 3000) g",
            [tenant.id],
        )
        cursor.execute("ANALYZE scheduler_app_executionlog")
    query = log_search.executions_with_log_words(
        tenant=tenant, words="fetched", runs_since=timezone.now() - timedelta(hours=1)
    )
    with connection.cursor() as cursor:
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "idx_log_tenant_hour" in plan, plan
    assert "date_bin" in index_cond and "tenant_id" in index_cond, plan


def test_the_planner_expects_few_logs_for_a_word_none_has(tenant, history):
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_executionlog")
    assert log_search.expected_matches(tenant=tenant, words="ECONNREFUSED") < (
        log_search.FEW_MATCHES
    )


def _signed_in(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


def _history_rows(page: str) -> list[str]:
    table = page.split('<table id="history"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'data-execution-id="([0-9a-f-]+)"', table)


def test_the_dashboard_search_box_asks_the_same_windows(tenant_and_user, history, monkeypatch):
    # The task page's search reads the newest runs from the narrowest window expected to
    # hold them, as the API does; what it shows is the whole history's newest.
    tried = []

    def windows(**kwargs):
        for start in log_search_windows.newest_first_windows(**kwargs):
            tried.append(start)
            yield start

    monkeypatch.setattr("dashboard.views.newest_first_windows", windows)
    monkeypatch.setattr(
        "scheduler_app.selectors.log_search_windows._middling", lambda tenant, words: True
    )
    monkeypatch.setattr(
        "scheduler_app.selectors.log_search_windows._expected_in_window",
        lambda tenant, words, start: 1e9,
    )
    client, task = _signed_in(tenant_and_user), history["recent"][0].task
    page = client.get(f"/dashboard/tasks/{task.id}", {"log_contains": "fetched rows"})
    newest = sorted(history["recent"], key=lambda r: r.scheduled_at, reverse=True)
    assert _history_rows(page.content.decode()) == [str(r.id) for r in newest[:25]]
    assert 'id="history-count">25+<' in page.content.decode()
    assert len(tried) == 1 and timezone.now() - tried[0] < timedelta(hours=1, minutes=1)
    # Words the windows cannot fill a page with: every window, then the whole history.
    tried.clear()
    page = client.get(f"/dashboard/tasks/{task.id}", {"log_contains": "slow"}).content.decode()
    slow = sorted(history["few"] + history["old few"], key=lambda r: r.scheduled_at)
    assert _history_rows(page) == [str(r.id) for r in reversed(slow)]
    assert 'id="history-count">4<' in page
    assert tried[-1] is None and len(tried) == len(log_search.SEARCH_WINDOWS) + 1


def test_the_index_is_asked_for_the_rarer_words_and_each_log_checked(api, tenant):
    # `host` and `eu` are in every log: the index is asked for `-7` and `-3` only, and the
    # logs it returns are checked against the whole query (phrases in their order).
    task = make_task(tenant, name="fetcher", schedule={"type": "manual"})
    texts = [f"fetched from host-{i % 9} in region eu-{i % 4}" for i in range(300)]
    texts += ["fetched from host-3 in region eu-7"]  # every lexeme, neither phrase
    runs = _runs(tenant, task, ago=[timedelta(seconds=i + 1) for i in range(len(texts))], text="")
    for run, text in zip(runs, texts, strict=True):
        ExecutionLog.platform.filter(execution_id=run.id).update(text=text)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_executionlog")
    assert log_search.index_words("host-7 eu-3") == "'-7' & '-3'"
    assert log_search.index_words("host-7 or eu-3") is None  # not only words: as written
    assert log_search.index_words("ECONNREFUSED") is None  # no common word
    wanted = {str(r.id) for r, t in zip(runs, texts, strict=True) if "host-7 in region eu-3" in t}
    assert len(wanted) == 300 // 36 + 1
    found = [i for page in _pages(api, "host-7 eu-3") for i in page]
    assert sorted(found) == sorted(wanted)
    assert _pages(api, '"host-7 region"') == [[]]  # a phrase is still a phrase


def test_a_finish_never_dates_a_log_before_its_run(api, tenant):
    # A worker whose clock is behind the run's time (a run recorded ahead by a clock that
    # runs fast): the log still lands in the window of its run's time, so a newest-first
    # search over that window finds it.
    task = make_task(tenant, name="fetcher", schedule={"type": "manual"})
    ahead, token = timezone.now() + timedelta(hours=3), uuid.uuid4()
    run = TaskExecution.objects.create(
        id=uuid.uuid4(),
        tenant=tenant,
        task=task,
        status="running",
        trigger="manual",
        queue="normal",
        scheduled_at=ahead,
        attempt=1,
        max_attempts=1,
        worker_id="w1",
        claim_token=token,
    )
    report = run_finish(
        execution_id=run.id,
        claim_token=token,
        outcome=HandlerOutcome("success"),
        log_text="upstream ECONNREFUSED",
    )
    assert report.accepted
    assert ExecutionLog.platform.get(execution_id=run.id).created_at >= ahead
    found = log_search.executions_with_log_words(
        tenant=tenant, words="ECONNREFUSED", runs_since=ahead - timedelta(minutes=1)
    )
    assert [row["execution_id"] for row in found] == [run.id]
