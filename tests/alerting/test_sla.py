"""SLAs: a run not finished `sla_seconds` after its scheduled time raises `sla_missed` to the
tenant's alert channels, once per run, resolves when it ends, and shows on the dashboard."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.rules import alerts_evaluate
from alerting.services.channels import notification_channel_create
from alerting.tasks import enqueue_incident_changes
from dags.models import DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskExecution
from tests.alerting.test_notifications import drain
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _running(task, *, scheduled_seconds_ago: float, **extra) -> TaskExecution:
    now = timezone.now()
    execution = TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status=extra.pop("status", "running"),
        scheduled_at=now - timedelta(seconds=scheduled_seconds_ago),
        started_at=now - timedelta(seconds=scheduled_seconds_ago),
        **extra,
    )
    if execution.root_execution_id is None:
        TaskExecution.platform.filter(id=execution.id).update(root_execution_id=execution.id)
        execution.root_execution_id = execution.id
    return execution


def _sla(changes):
    return [
        (incident.key, resolved) for incident, resolved in changes if incident.rule == "sla_missed"
    ]


def test_a_late_run_is_announced_once_and_resolved_when_it_ends(
    tenant, receiver, notify_settings, signed_in
):
    notification_channel_create(
        tenant=tenant, name="hook", kind="webhook", target=receiver.url + "/hook"
    )
    task = make_task(tenant, name="nightly", sla_seconds=60)
    late = _running(task, scheduled_seconds_ago=120)
    _running(task, scheduled_seconds_ago=30)  # within its SLA
    make_task(tenant, name="no-sla")
    _running(task, scheduled_seconds_ago=86400, trigger="backfill")  # a past fire: no SLA
    _running(make_task(tenant, name="no-sla-2"), scheduled_seconds_ago=9999)

    changes = alerts_evaluate()
    assert _sla(changes) == [(f"execution:{late.id}", False)]
    assert _sla(alerts_evaluate()) == []  # still late: nobody is told twice
    enqueue_incident_changes(changes)
    drain(notify_settings)
    bodies = [b for b in receiver.bodies("/hook") if b["rule"] == "sla_missed"]
    assert len(bodies) == 1 and "nightly" in bodies[0]["text"]
    assert "SLA of 60 s" in bodies[0]["text"]

    page = signed_in.get("/dashboard/").content.decode()
    assert 'id="sla-misses"' in page and "still running" in page

    # A retry of the same run stays the same run: still one incident.
    TaskExecution.platform.filter(id=late.id).update(status="failed")
    _running(
        task,
        scheduled_seconds_ago=1,
        status="pending",
        attempt=2,
        root_execution_id=late.id,
    )
    assert _sla(alerts_evaluate()) == []
    TaskExecution.platform.filter(root_execution_id=late.id).update(status="success")
    assert _sla(alerts_evaluate()) == [(f"execution:{late.id}", True)]
    assert _sla(alerts_evaluate()) == []  # ended: never again


def test_a_late_dag_run_is_an_sla_miss(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "d",
            "sla_seconds": 30,
            "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
        },
    )
    run = dag_trigger(dag=dag)
    assert _sla(alerts_evaluate()) == []
    DagRun.platform.filter(id=run.id).update(scheduled_at=timezone.now() - timedelta(minutes=1))
    assert _sla(alerts_evaluate()) == [(f"dag_run:{run.id}", False)]


@pytest.fixture
def signed_in(tenant_and_user):
    from django.test import Client

    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


@pytest.mark.parametrize("value", [0, -5, 10**9, 1.5])
def test_a_bad_sla_is_a_400_naming_it(api, value):
    response = api.post(
        "/api/v1/tasks",
        {
            "name": "x",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
            "sla_seconds": value,
        },
        format="json",
    )
    assert response.status_code == 400 and response.json()["field"] == "sla_seconds"
    raw = {
        "dag": "d",
        "sla_seconds": value,
        "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
    }
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400 and response.json()["field"] == "sla_seconds"


def test_sla_seconds_round_trips_through_the_api(api):
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "x",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
            "sla_seconds": 900,
        },
        format="json",
    )
    assert created.status_code == 201 and created.json()["sla_seconds"] == 900
