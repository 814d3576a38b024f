"""Incidents where operators look, in the dashboard: the overview, the Incidents page (with the
nav's badge of open ones), the task's and the DAG's page, each in words with its subject
linked by name and its runbook; Acknowledge / Resolve for operators, audited; a viewer and
another tenant play the attacker."""

from __future__ import annotations

import pytest
from django.test import Client

from alerting.services.incidents import incident_open
from dags.models import DagNodeExecution, DagVersion
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.choices import Role
from scheduler_app.models import AuditEntry, TaskDefinition, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(tenant_and_user) -> Client:
    _, user = tenant_and_user
    client = Client()
    assert client.login(username=user.username, password="pw-123456")
    return client


def _failing(tenant, name="nightly-report"):
    task = make_task(tenant, name=name, schedule={"type": "manual"})
    incident = incident_open(
        rule="task_failing", key=str(task.id), tenant=tenant, summary=f"task {name} is failing"
    )
    return task, incident


def test_the_overview_and_the_incidents_page_show_it_in_words(signed_in, tenant):
    task, incident = _failing(tenant)
    rate = incident_open(
        rule="error_rate_high",
        key=str(tenant.id),
        tenant=tenant,
        summary="19.0% of 40 runs in the last hour failed (threshold 5%)",
    )
    for url in ("/dashboard/", "/dashboard/incidents"):
        page = signed_in.get(url).content.decode()
        assert f'id="incident-{incident.id}"' in page and f'id="incident-{rate.id}"' in page
        assert "Task failing" in page and "Error rate high" in page
        assert f'<a href="/dashboard/tasks/{task.id}">nightly-report</a>' in page
        assert f'<a href="/dashboard/runs?status=failed">all runs of {tenant.name}</a>' in page
        assert "operations/runbooks.html#schedulererrorratehigh" in page
        assert "operations/runbooks.html#task-failing-repeatedly" in page
        # The nav's badge counts the two open ones; no bare UUID stands for a subject.
        assert 'id="open-incidents-badge">2<' in page
        assert f">{task.id}<" not in page and f">{tenant.id}<" not in page
        assert "/acknowledge" in page and "/resolve" in page


def test_acknowledge_then_resolve_from_the_page_audited_and_back_where_it_was(signed_in, tenant):
    task, incident = _failing(tenant)
    response = signed_in.post(
        f"/dashboard/incidents/{incident.id}/acknowledge", {"next": f"/dashboard/tasks/{task.id}"}
    )
    assert response.status_code == 302 and response["Location"] == f"/dashboard/tasks/{task.id}"
    incident.refresh_from_db()
    assert incident.state == "acknowledged" and incident.acknowledged_by == "user:acme-admin"
    page = signed_in.get("/dashboard/incidents").content.decode()
    assert "acknowledged</span> by user:acme-admin" in page
    assert "open-incidents-badge" not in page  # only open, unacknowledged ones count
    assert f"/dashboard/incidents/{incident.id}/acknowledge" not in page  # done already

    response = signed_in.post(
        f"/dashboard/incidents/{incident.id}/resolve",
        {"note": "bad deploy rolled back", "next": "https://evil.example.com/"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == "/dashboard/incidents"  # not off-site
    page = response.content.decode()
    assert "Resolved: Task failing" in page
    assert "by user:acme-admin: “bad deploy rolled back”" in page
    incident.refresh_from_db()
    assert incident.state == "resolved" and incident.resolution_note == "bad deploy rolled back"
    assert list(
        AuditEntry.platform.filter(object_id=str(incident.id))
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["incident.acknowledge", "incident.resolve"]
    # Resolving again says who did, and changes nothing.
    again = signed_in.post(f"/dashboard/incidents/{incident.id}/resolve", follow=True)
    assert "already resolved by user:acme-admin" in again.content.decode()
    assert AuditEntry.platform.filter(object_id=str(incident.id)).count() == 2


def test_a_too_long_note_is_refused_and_changes_nothing(signed_in, tenant):
    _, incident = _failing(tenant)
    response = signed_in.post(
        f"/dashboard/incidents/{incident.id}/resolve", {"note": "x" * 2001}, follow=True
    )
    assert "note is longer than 2000 characters" in response.content.decode()
    incident.refresh_from_db()
    assert incident.state == "open"


def test_a_viewer_sees_incidents_without_buttons_and_cannot_act(tenant_and_user, tenant):
    _, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    viewer = Client()
    assert viewer.login(username=user.username, password="pw-123456")
    _, incident = _failing(tenant)
    page = viewer.get("/dashboard/incidents").content.decode()
    assert f'id="incident-{incident.id}"' in page
    assert "incident-ack" not in page and "incident-resolve" not in page
    for action in ("acknowledge", "resolve"):
        assert viewer.post(f"/dashboard/incidents/{incident.id}/{action}").status_code == 403
    incident.refresh_from_db()
    assert incident.state == "open"
    assert not AuditEntry.platform.filter(object_id=str(incident.id)).exists()


def test_another_tenant_never_sees_nor_touches_it(tenant, tenant_factory):
    _task, incident = _failing(tenant)
    _, intruder_user = tenant_factory("globex")
    intruder = Client()
    assert intruder.login(username=intruder_user.username, password="pw-123456")
    for url in ("/dashboard/", "/dashboard/incidents"):
        page = intruder.get(url).content.decode()
        assert str(incident.id) not in page and "nightly-report" not in page
        assert "open-incidents-badge" not in page
    for action in ("acknowledge", "resolve"):
        assert intruder.post(f"/dashboard/incidents/{incident.id}/{action}").status_code == 404
    incident.refresh_from_db()
    assert incident.state == "open"


def test_the_task_page_shows_its_incidents_and_not_others(signed_in, tenant):
    task, incident = _failing(tenant)
    _other, elsewhere = _failing(tenant, "another-task")
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert 'id="task-incidents"' in page and f'id="incident-{incident.id}"' in page
    assert f'id="incident-{elsewhere.id}"' not in page
    quiet = make_task(tenant, name="quiet", schedule={"type": "manual"})
    assert (
        'id="task-incidents"' not in signed_in.get(f"/dashboard/tasks/{quiet.id}").content.decode()
    )


def test_the_dag_page_shows_its_runs_sla_miss_and_its_nodes_failing(signed_in, tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "fan-out-example",
            "tasks": [{"id": "merge", "handler": {"type": "python", "callable": "noop"}}],
        },
    )
    run = dag_trigger(dag=dag)
    node_task = TaskDefinition.platform.get(id=DagVersion.objects.get(dag=dag).node_tasks["merge"])
    assert DagNodeExecution.objects.filter(run=run).exists()
    sla = incident_open(
        rule="sla_missed", key=f"dag_run:{run.id}", tenant=tenant, summary="DAG run past its SLA"
    )
    failing = incident_open(
        rule="task_failing", key=str(node_task.id), tenant=tenant, summary="merge is failing"
    )
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert f'id="incident-{sla.id}"' in page and f'id="incident-{failing.id}"' in page
    assert (
        f'href="/dashboard/dags/{dag.id}/runs/{run.id}">'
        f"run {str(run.id)[:8]} of DAG fan-out-example<" in page
    )
    # The node's hidden task by the one naming helper, here and on its own page.
    assert "fan-out-example › merge (v1)</a>" in page
    task_page = signed_in.get(f"/dashboard/tasks/{node_task.id}").content.decode()
    assert "<h1>Task fan-out-example › merge (v1)</h1>" in task_page
