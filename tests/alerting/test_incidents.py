"""Incidents where operators look, over the API: listed by state, in words (the rule's title,
what it concerns by name, its runbook), acknowledged and resolved by operators, audited,
walled per tenant; an acknowledged one is not announced again, a resolved one that fires
again opens a new incident."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from alerting.incident_words import RULE_WORDS
from alerting.models import AlertIncident
from alerting.rules import RULES, alerts_evaluate
from alerting.services.incidents import incident_open, incidents_renotify_due
from alerting.services.notices import incident_message
from scheduler_app.choices import Role
from scheduler_app.models import AuditEntry, TaskExecution, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _client_of(user) -> APIClient:
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token", {"username": user.username, "password": "pw-123456"}, format="json"
    )
    assert response.status_code == 200, response.content
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['access']}")
    return client


def _failing(tenant, name="nightly-report"):
    task = make_task(tenant, name=name, schedule={"type": "manual"})
    return task, incident_open(
        rule="task_failing",
        key=str(task.id),
        tenant=tenant,
        summary=f"task {name} is failing (exit_code)",
    )


def test_every_rule_has_words():
    assert set(RULES) | {"task_failing"} <= set(RULE_WORDS)


def test_an_incident_reads_in_words_with_its_subject_by_name_and_its_runbook(api, tenant):
    task, incident = _failing(tenant)
    body = api.get(f"/api/v1/incidents/{incident.id}").json()
    assert body["title"] == "Task failing" and body["state"] == "open"
    assert body["concerns"] == {
        "type": "task",
        "id": str(task.id),
        "name": "nightly-report",
        "dag_id": "",
    }
    assert body["runbook_url"].endswith("operations/runbooks.html#task-failing-repeatedly")
    rate = incident_open(
        rule="error_rate_high", key=str(tenant.id), tenant=tenant, summary="19.0% of 40 runs"
    )
    listed = api.get("/api/v1/incidents").json()["results"]
    assert [row["id"] for row in listed] == [str(rate.id), str(incident.id)]
    assert listed[0]["concerns"]["name"] == f"all runs of {tenant.name}"


def test_acknowledge_then_resolve_with_a_note_moves_it_between_the_state_lists(api, tenant):
    _, incident = _failing(tenant)
    assert [r["id"] for r in api.get("/api/v1/incidents?state=open").json()["results"]] == [
        str(incident.id)
    ]
    acked = api.post(f"/api/v1/incidents/{incident.id}/acknowledge")
    assert acked.status_code == 200, acked.content
    assert acked.json()["state"] == "acknowledged"
    assert acked.json()["acknowledged_by"] == "user:acme-admin"
    assert api.get("/api/v1/incidents?state=open").json()["results"] == []
    assert len(api.get("/api/v1/incidents?state=acknowledged").json()["results"]) == 1
    # A second acknowledgement changes nothing and records nothing more.
    assert api.post(f"/api/v1/incidents/{incident.id}/acknowledge").status_code == 200

    resolved = api.post(
        f"/api/v1/incidents/{incident.id}/resolve",
        {"note": "bad deploy rolled back"},
        format="json",
    )
    assert resolved.status_code == 200, resolved.content
    assert resolved.json()["state"] == "resolved"
    assert resolved.json()["resolved_by"] == "user:acme-admin"
    assert resolved.json()["resolution_note"] == "bad deploy rolled back"
    assert [r["id"] for r in api.get("/api/v1/incidents?state=resolved").json()["results"]] == [
        str(incident.id)
    ]
    again = api.post(f"/api/v1/incidents/{incident.id}/resolve")
    assert (
        again.status_code == 409 and "already resolved by user:acme-admin" in again.content.decode()
    )
    assert api.post(f"/api/v1/incidents/{incident.id}/acknowledge").status_code == 409

    entries = AuditEntry.platform.filter(tenant=tenant, object_id=str(incident.id)).order_by("id")
    assert [e.action for e in entries] == ["incident.acknowledge", "incident.resolve"]
    assert entries[1].detail["summary"] == (
        "user:acme-admin resolved Task failing (task nightly-report is failing (exit_code)):"
        " bad deploy rolled back"
    )


def test_bad_input_is_a_400_and_changes_nothing(api, tenant):
    _, incident = _failing(tenant)
    assert api.get("/api/v1/incidents?state=closed").status_code == 400
    too_long = api.post(
        f"/api/v1/incidents/{incident.id}/resolve", {"note": "x" * 2001}, format="json"
    )
    assert too_long.status_code == 400
    unknown = api.post(f"/api/v1/incidents/{incident.id}/resolve", {"nope": 1}, format="json")
    assert unknown.status_code == 400
    assert (
        api.post(
            f"/api/v1/incidents/{incident.id}/acknowledge", {"x": 1}, format="json"
        ).status_code
        == 400
    )
    assert api.get("/api/v1/incidents/not-a-uuid").status_code == 404
    incident.refresh_from_db()
    assert incident.state == "open" and incident.resolved_at is None
    assert not AuditEntry.platform.filter(object_id=str(incident.id)).exists()


def test_a_viewer_reads_but_cannot_acknowledge_or_resolve(tenant_and_user):
    tenant, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    viewer = _client_of(user)
    _, incident = _failing(tenant)
    assert viewer.get(f"/api/v1/incidents/{incident.id}").status_code == 200
    for action in ("acknowledge", "resolve"):
        response = viewer.post(f"/api/v1/incidents/{incident.id}/{action}")
        assert response.status_code == 403, response.content
        assert "nightly-report" not in response.content.decode()
    incident.refresh_from_db()
    assert incident.acknowledged_at is None and incident.resolved_at is None
    assert not AuditEntry.platform.filter(object_id=str(incident.id)).exists()


def test_an_operator_may_acknowledge(tenant_and_user):
    tenant, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.OPERATOR)
    _, incident = _failing(tenant)
    assert _client_of(user).post(f"/api/v1/incidents/{incident.id}/acknowledge").status_code == 200


def test_another_tenant_never_sees_nor_touches_an_incident(api, tenant, tenant_factory):
    _, incident = _failing(tenant)
    _, intruder_user = tenant_factory("globex")
    intruder = _client_of(intruder_user)
    assert intruder.get("/api/v1/incidents").json()["results"] == []
    for state in ("open", "acknowledged", "resolved"):
        assert intruder.get(f"/api/v1/incidents?state={state}").json()["results"] == []
    assert intruder.get(f"/api/v1/incidents/{incident.id}").status_code == 404
    for action in ("acknowledge", "resolve"):
        response = intruder.post(f"/api/v1/incidents/{incident.id}/{action}")
        assert response.status_code == 404
        assert "nightly-report" not in response.content.decode()
    incident.refresh_from_db()
    assert incident.state == "open"
    # A platform incident (no tenant) is nobody's to list.
    platform = incident_open(rule="dead_worker", key="w1", summary="worker w1 stopped")
    assert api.get(f"/api/v1/incidents/{platform.id}").status_code == 404
    assert str(platform.id) not in api.get("/api/v1/incidents").content.decode()


def test_an_acknowledged_incident_is_not_announced_again(tenant, settings):
    settings.ALERTS = {**settings.ALERTS, "RENOTIFY_SECONDS": 600}
    _, quiet = _failing(tenant, "quiet")
    _, loud = _failing(tenant, "loud")
    long_ago = timezone.now() - timedelta(seconds=601)
    AlertIncident.platform.filter(id__in=[quiet.id, loud.id]).update(
        opened_at=long_ago, notified_at=long_ago
    )
    AlertIncident.platform.filter(id=quiet.id).update(acknowledged_at=timezone.now())
    reminded = incidents_renotify_due(rule="task_failing", keys={quiet.key, loud.key})
    assert [i.id for i in reminded] == [loud.id]
    assert incident_message(reminded[0], resolved=False)["event"] == "alert_reminder"
    # Announced once per period, whoever evaluates.
    assert incidents_renotify_due(rule="task_failing", keys={quiet.key, loud.key}) == []


def _failed_runs(tenant, count: int) -> None:
    task = make_task(tenant, name="always-fails", schedule={"type": "manual"})
    now = timezone.now()
    TaskExecution.objects.bulk_create(
        TaskExecution(
            tenant=tenant,
            task=task,
            status="failed",
            scheduled_at=now - timedelta(minutes=1, seconds=i),
            completed_at=now,
        )
        for i in range(count)
    )


def test_a_resolved_incident_that_fires_again_opens_a_new_one(api, tenant, settings):
    settings.ALERTS = {**settings.ALERTS, "MIN_RUNS_FOR_RATE": 5}
    _failed_runs(tenant, 8)
    alerts_evaluate()
    first = AlertIncident.platform.get(tenant=tenant, rule="error_rate_high")
    assert api.post(f"/api/v1/incidents/{first.id}/resolve").status_code == 200
    changes = alerts_evaluate()
    second = AlertIncident.platform.get(
        tenant=tenant, rule="error_rate_high", resolved_at__isnull=True
    )
    assert second.id != first.id and (second, False) in changes
    first.refresh_from_db()
    assert first.state == "resolved" and first.resolved_by == "user:acme-admin"
