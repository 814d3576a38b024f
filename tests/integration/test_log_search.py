"""Log search finds one run among many on a real worker: the API's log_contains filter and
the dashboard's history search box; another tenant's logs never answer."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.needs_os_tool("bubblewrap")
def test_log_search_finds_the_one_run_whose_log_has_the_words(
    tenant_and_user, tenant_factory, api, client, live_worker
):
    tenant, user = tenant_and_user
    task = make_task(
        tenant,
        name="fetcher",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", "echo fetching $TASK_PARAMETERS"]},
    )
    runs = [task_trigger(task=task, parameters={"host": f"host-{i}"}) for i in range(12)]
    needle = task_trigger(
        task=task, parameters={"host": "db-7", "error": "ECONNREFUSED upstream-gateway"}
    )
    other, _ = tenant_factory("globex")
    theirs = make_task(
        other,
        name="theirs",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", "echo ECONNREFUSED upstream-gateway"]},
    )
    their_run = task_trigger(task=theirs)
    every = [*runs, needle, their_run]
    wait_until(
        lambda: (
            ExecutionLog.platform.filter(execution_id__in=[r.id for r in every]).count()
            == len(every)
        ),
        timeout=60,
        message="every run's log to be stored",
    )
    assert set(
        TaskExecution.platform.filter(id__in=[r.id for r in every]).values_list("status", flat=True)
    ) == {"success"}

    found = api.get("/api/v1/executions", {"log_contains": "ECONNREFUSED upstream-gateway"})
    assert found.status_code == 200
    assert [e["id"] for e in found.json()["results"]] == [str(needle.id)]
    # Every word must be there; case does not matter; a word no log has finds nothing.
    assert [
        e["id"]
        for e in api.get("/api/v1/executions", {"log_contains": "econnrefused db-7"}).json()[
            "results"
        ]
    ] == [str(needle.id)]
    assert (
        api.get("/api/v1/executions", {"log_contains": "ECONNREFUSED host-3"}).json()["results"]
        == []
    )
    assert len(api.get("/api/v1/executions", {"log_contains": "fetching"}).json()["results"]) == 13
    bad = api.get("/api/v1/executions", {"log_contains": " "})
    assert bad.status_code == 400 and bad.json()["field"] == "log_contains"

    client.force_login(user)
    page = client.get(
        f"/dashboard/tasks/{task.id}", {"log_contains": "ECONNREFUSED"}
    ).content.decode()
    assert 'id="log-search"' in page and 'id="history-filter"' in page
    history = page.split('<table id="history"', 1)[1].split("</table>", 1)[0]
    assert str(needle.id) in history and str(runs[0].id) not in history


@pytest.mark.django_db
def test_the_search_expression_is_the_indexed_one():
    from scheduler_app.selectors.log_search import logs_with_words

    query = logs_with_words("timeout").values("execution_id")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "idx_log_search_words" in plan, plan
