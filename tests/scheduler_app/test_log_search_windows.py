"""Log search asks recent windows before the whole history (`scheduler_app.api.log_search_pages`):
every page, and every cursor's next page, is the one the whole-history read gives; old runs
are still found; the windowed query reads the word index by tenant and hour."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler_app import log_search
from scheduler_app.models import ExecutionLog, TaskExecution
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
        ExecutionLog.objects.filter(execution_id=run.id).update(
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
    # Words taken as neither few nor common go through the windows (the planner's estimates
    # skip those it expects to fall short; a single window is always tried); as the planner
    # sees these few logs, they are read from the whole history at once: the pages agree.
    if windows:
        monkeypatch.setattr(
            "scheduler_app.api.log_search_pages._middling", lambda tenant, words: True
        )
    if windows == "the last hour":
        monkeypatch.setattr(
            "scheduler_app.api.log_search_pages.SEARCH_WINDOWS", (timedelta(hours=1),)
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
    # Enough logs that the planner prefers the word index to the tenant's btree.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_app_executionlog (execution_id, tenant_id, text, size_bytes,"
            " truncated, created_at) SELECT gen_random_uuid(), %s, 'fetched ' || g || ' rows',"
            " 0, false, now() - g * interval '1 minute' FROM generate_series(1, 3000) g",
            [tenant.id],
        )
        cursor.execute("ANALYZE scheduler_app_executionlog")
    query = log_search.executions_with_log_words(
        tenant=tenant, words="timeout", runs_since=timezone.now() - timedelta(hours=1)
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
