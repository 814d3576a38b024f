"""Durable sleeps on real PostgreSQL, with the housekeeping's clock injected: the node
sleeps in a row (no execution, no worker), wakes once when the chore passes its time, and
the run goes on; `until` comes from the run's parameters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from dags.models import DagNodeState, DagRun, DagTimer
from dags.services.definitions import dag_create
from dags.services.runs import dag_run_cancel, dag_trigger
from dags.services.timers import sleeps_wake, timers_claim
from scheduler_app.models import TaskExecution

pytestmark = pytest.mark.django_db

ECHO = {"type": "python", "callable": "upstream_echo"}


def _state(run, node_id):
    return DagNodeState.objects.get(run=run, node_id=node_id)


def _nap_dag(tenant, **sleep):
    return dag_create(
        tenant=tenant,
        raw={
            "dag": "nap",
            "tasks": [
                {"id": "nap", "type": "sleep", **(sleep or {"duration": "2h"})},
                {"id": "after", "handler": ECHO, "depends_on": ["nap"]},
            ],
        },
    )


def test_a_sleep_wakes_once_when_the_chore_passes_its_time_and_the_run_goes_on(tenant):
    run = dag_trigger(dag=_nap_dag(tenant))
    started = timezone.now()
    nap = _state(run, "nap")
    assert nap.status == "sleeping" and nap.execution_id is None
    assert not TaskExecution.platform.exists()  # nothing runs: no worker slot is held
    timer = DagTimer.platform.get(run=run, node_id="nap")
    assert timer.kind == "sleep" and timer.status == "waiting"
    assert abs((timer.due_at - started).total_seconds() - 7200) < 5

    assert sleeps_wake(now=timer.due_at - timedelta(seconds=1)) == 0
    assert _state(run, "nap").status == "sleeping"
    assert sleeps_wake(now=timer.due_at) == 1
    assert _state(run, "nap").status == "success"
    assert _state(run, "nap").result["due_at"] == timer.due_at.isoformat()
    after = _state(run, "after")
    assert after.status in ("pending", "queued") and after.execution_id is not None
    assert TaskExecution.platform.count() == 1
    # Once: later rounds find nothing due.
    assert sleeps_wake(now=timer.due_at + timedelta(hours=1)) == 0
    assert DagTimer.platform.get(id=timer.id).status == "fired"
    assert TaskExecution.platform.count() == 1


def test_a_round_that_took_a_sleep_holds_it_until_its_lease_ends(tenant):
    run = dag_trigger(dag=_nap_dag(tenant, duration="10s"))
    timer = DagTimer.platform.get(run=run)
    due = timer.due_at + timedelta(seconds=1)
    claimed = timers_claim(kind="sleep", now=due, limit=10, per_tenant=10)
    assert [t.id for t in claimed.timers] == [timer.id]
    # A second round (another beat that believes it leads) takes nothing meanwhile.
    assert timers_claim(kind="sleep", now=due, limit=10, per_tenant=10).timers == []
    assert sleeps_wake(now=due) == 0
    # The first round died: after its lease the row is taken again and the node wakes once.
    assert sleeps_wake(now=claimed.lease + timedelta(seconds=1)) == 1
    assert _state(run, "nap").status == "success"


def test_until_comes_from_the_run_parameters(tenant):
    dag = _nap_dag(tenant, until="{{ parameters.release_at }}")
    release = (timezone.now() + timedelta(hours=3)).replace(microsecond=0)
    run = dag_trigger(dag=dag, parameters={"release_at": release.isoformat()})
    timer = DagTimer.platform.get(run=run)
    assert timer.due_at == release and _state(run, "nap").status == "sleeping"
    assert sleeps_wake(now=release) == 1
    assert _state(run, "nap").status == "success"


def test_an_until_already_past_wakes_at_once_and_a_bad_one_fails_the_node(tenant):
    dag = _nap_dag(tenant, until="{{ parameters.release_at }}")
    past = dag_trigger(dag=dag, parameters={"release_at": "2020-01-01T00:00:00Z"})
    assert _state(past, "nap").status == "success"
    assert _state(past, "after").status in ("pending", "queued")

    missing = dag_trigger(dag=dag, parameters={})
    assert _state(missing, "nap").status == "failed"
    assert "no parameter release_at" in _state(missing, "nap").error_message
    naive = dag_trigger(dag=dag, parameters={"release_at": "2030-01-01T00:00:00"})
    assert "has no UTC offset" in _state(naive, "nap").error_message
    far = dag_trigger(dag=dag, parameters={"release_at": "2999-01-01T00:00:00Z"})
    assert "retention window" in _state(far, "nap").error_message
    for run in (missing, naive, far):
        assert _state(run, "after").status == "upstream_failed"
        assert DagRun.platform.get(id=run.id).status == "failed"


def test_a_cancelled_run_leaves_its_sleep_cancelled_not_woken(tenant):
    run = dag_trigger(dag=_nap_dag(tenant))
    dag_run_cancel(run=run)
    timer = DagTimer.platform.get(run=run)
    assert sleeps_wake(now=timer.due_at) == 0
    assert DagTimer.platform.get(id=timer.id).status == "cancelled"
    assert _state(run, "nap").status == "cancelled"
    assert not TaskExecution.platform.exclude(status="cancelled").exists()


def test_the_run_detail_and_the_graph_show_the_sleep_and_its_time_left(
    tenant_and_user, api, client
):
    tenant, user = tenant_and_user
    dag = _nap_dag(tenant)
    run = dag_trigger(dag=dag)
    detail = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").json()
    [timer] = detail["timers"]
    assert timer["node_id"] == "nap" and timer["kind"] == "sleep"
    assert timer["status"] == "waiting" and 7100 < timer["seconds_left"] <= 7200
    assert {n["node_id"]: n["status"] for n in detail["nodes"]}["nap"] == "sleeping"
    client.force_login(user)
    page = client.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'data-state="sleeping" data-tone="timer"' in page
    assert "wakes in 1h 59m" in page
    assert 'id="timers"' in page and 'data-timer-status="waiting"' in page


def test_another_tenant_sees_no_sleep_of_this_one(tenant, tenant_factory):
    """The attacker: a tenant asking for this tenant's run by its id, over the API and the
    dashboard. 404 both ways, and nothing of the timers in the answer."""
    dag = _nap_dag(tenant)
    run = dag_trigger(dag=dag)
    _other, intruder = tenant_factory("globex")
    api = APIClient()
    token = api.post(
        "/api/v1/auth/token",
        {"username": intruder.username, "password": "pw-123456"},
        format="json",
    ).json()["access"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}")
    assert response.status_code == 404 and "timers" not in response.content.decode()
    browser = Client()
    browser.force_login(intruder)
    page = browser.get(f"/dashboard/dags/{dag.id}/runs/{run.id}")
    assert page.status_code == 404 and "wakes in" not in page.content.decode()
