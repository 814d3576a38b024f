"""What a log search may cost (`scheduler_app.selectors.log_search_budget`), on real PostgreSQL and
Redis: a search over its time budget is cut with a clear 503, a tenant's searches at once are
capped (429 with Retry-After, other tenants unaffected), places of killed searches free
themselves, Redis unreachable refuses searches (fails closed), and the dashboard says so."""

from __future__ import annotations

import math
import re
import time

import pytest
from django.db import connection
from django.test import Client

from scheduler_app.monitoring.counters import read_budget_refusals
from scheduler_app.selectors import log_search_budget
from scheduler_app.selectors.log_search_budget import LEASE_MARGIN_SECONDS, log_search_place_take
from tests.api_clients import member_client
from tests.factories import make_task
from tests.log_history import UNFILLABLE_PHRASE, logged_runs_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def budget(settings):
    def set_budget(*, timeout: float = 2.0, at_once: int = 4) -> None:
        settings.LOG_SEARCH = {"TIMEOUT_SECONDS": timeout, "MAX_CONCURRENT_PER_TENANT": at_once}

    set_budget()
    return set_budget


def _statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def _shown(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.cursor.execute(f"SHOW {name}")  # the driver's cursor: no wrapper sees it
        return cursor.cursor.fetchone()[0]


def test_a_search_over_its_time_budget_is_cut_with_a_503_asking_to_narrow_it(tenant, budget):
    task = make_task(tenant, name="fetcher", schedule={"type": "manual"})
    logged_runs_create(task, 40_000)
    viewer, _ = member_client(tenant, "viewer")
    jit_default = _shown("jit")
    budget(timeout=0.05)
    cut = viewer.get("/api/v1/executions", {"log_contains": UNFILLABLE_PHRASE})
    assert cut.status_code == 503, cut.content
    body = cut.json()
    assert body["code"] == "log_search_timeout" and body["field"] == "log_contains"
    assert "narrow it" in body["message"] and "0.05 s" in body["message"]
    assert _statement_timeout() == "0"  # nothing of the budget outlives the search
    assert _shown("jit") == jit_default
    assert read_budget_refusals()[(str(tenant.id), "log_search_timeout")] == 1
    # Within its budget the same search answers (an empty page: no log has the phrase),
    # every statement of it without JIT (whose compile time no timeout interrupts).
    budget(timeout=60)
    seen: list[str] = []

    def jit_of_each_statement(execute, sql, params, many, context):
        seen.append(_shown("jit"))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(jit_of_each_statement):
        whole = viewer.get("/api/v1/executions", {"log_contains": UNFILLABLE_PHRASE})
    assert whole.status_code == 200 and whole.json()["results"] == []
    searched = [jit for jit in seen if jit == "off"]
    assert len(searched) >= 2  # the estimates and the page
    assert _statement_timeout() == "0" and _shown("jit") == jit_default


def test_the_fifth_search_at_once_is_refused_with_retry_after_and_other_tenants_are_not(
    tenant, tenant_factory, budget
):
    budget(timeout=2.5)
    make_task(tenant, name="fetcher", schedule={"type": "manual"})
    in_flight = [log_search_place_take(tenant_id=tenant.id) for _ in range(4)]
    viewer, _ = member_client(tenant, "viewer")
    refused = viewer.get("/api/v1/executions", {"log_contains": "ECONNREFUSED"})
    assert refused.status_code == 429
    assert refused.json()["code"] == "too_many_log_searches"
    assert refused["Retry-After"] == str(math.ceil(2.5))
    assert read_budget_refusals()[(str(tenant.id), "log_search_concurrency")] == 1
    # Another tenant's searches have places of their own.
    other, _ = tenant_factory("globex")
    theirs, _ = member_client(other, "viewer")
    assert theirs.get("/api/v1/executions", {"log_contains": "ECONNREFUSED"}).status_code == 200
    # A search that ends gives its place back.
    log_search_budget.log_search_place_give_back(in_flight.pop())
    assert viewer.get("/api/v1/executions", {"log_contains": "ECONNREFUSED"}).status_code == 200
    assert log_search_budget.log_searches_running(tenant_id=tenant.id) == 3


def test_the_places_of_a_killed_web_process_free_themselves_when_their_leases_end(tenant, budget):
    budget(timeout=2.0, at_once=2)
    lease = 2.0 + LEASE_MARGIN_SECONDS
    long_ago = time.time() - lease - 1
    for _ in range(2):  # taken by searches whose process died: never given back
        log_search_place_take(tenant_id=tenant.id, now=long_ago)
    assert log_search_budget.log_searches_running(tenant_id=tenant.id) == 0
    viewer, _ = member_client(tenant, "viewer")
    assert viewer.get("/api/v1/executions", {"log_contains": "timeout"}).status_code == 200


def test_searches_are_refused_while_redis_cannot_be_reached(tenant, budget, settings):
    viewer, _ = member_client(tenant, "viewer")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    refused = viewer.get("/api/v1/executions", {"log_contains": "timeout"})
    assert refused.status_code == 503
    assert refused.json()["code"] == "log_search_unavailable"
    assert refused["Retry-After"] == "5"
    # The rest of the API is not behind this budget.
    assert viewer.get("/api/v1/executions").status_code == 200


def test_the_task_page_says_when_its_search_was_cut_or_had_to_wait(tenant_and_user, budget):
    tenant, user = tenant_and_user
    task = make_task(tenant, name="fetcher", schedule={"type": "manual"})
    logged_runs_create(task, 40_000)
    client = Client()
    client.force_login(user)

    def searched(words: str) -> str:
        page = client.get(f"/dashboard/tasks/{task.id}", {"log_contains": words})
        assert page.status_code == 200
        return re.sub(r"\s+", " ", page.content.decode())

    budget(timeout=0.05)
    assert "took longer than its 0.05 s budget and was stopped; narrow it" in searched(
        UNFILLABLE_PHRASE
    )
    budget(timeout=2.0, at_once=1)
    log_search_place_take(tenant_id=tenant.id)
    assert "already runs 1 log searches at once" in searched("fetched")
