"""The audit log through the API: each write one entry in words (verb, object, before and
after, reason, via), the old route-named entries read and filtered as the verbs they stand
for, the filters, and the walls: another tenant's admin and a viewer of the same tenant see
what the API's rules allow them, nothing more."""

from __future__ import annotations

import pytest

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import AuditEntry, TaskExecution
from scheduler_app.services.audit import audit_record
from tests.api_clients import jwt_client, member_client
from tests.dashboard.conftest import add_execution
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(tenant):
    return make_task(tenant, name="nightly")


def _results(client, query: str = "") -> list[dict]:
    response = client.get(f"/api/v1/audit{query}")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_a_pause_is_one_entry_in_words_with_before_after_and_reason(api, task):
    response = api.post(f"/api/v1/tasks/{task.id}/pause", {"note": "db upgrade"}, format="json")
    assert response.status_code == 200
    [row] = _results(api)
    assert (row["verb"], row["words"], row["object_type"], row["object_id"]) == (
        "task.pause",
        "paused task",
        "task",
        str(task.id),
    )
    assert (row["before"], row["after"]) == ({"paused": False}, {"paused": True})
    assert (row["reason"], row["via"], row["actor"]) == ("db upgrade", "api", "user:acme-admin")
    # Pausing a paused task changes nothing: no second entry.
    assert api.post(f"/api/v1/tasks/{task.id}/pause", {}, format="json").status_code == 200
    assert AuditEntry.platform.count() == 1


def test_cancel_and_delete_take_the_note_as_their_reason(api, task):
    queued = add_execution(task, minutes_ago=0, status=ExecutionStatus.QUEUED)
    cancel = api.post(
        f"/api/v1/executions/{queued.id}/cancel", {"note": "bad input"}, format="json"
    )
    assert cancel.status_code == 202
    assert (
        api.delete(f"/api/v1/tasks/{task.id}", {"note": "retired"}, format="json").status_code
        == 204
    )
    rows = {row["verb"]: row for row in _results(api)}
    assert rows["execution.cancel"]["reason"] == "bad input"
    assert rows["execution.cancel"]["after"] == {"status": "cancelled"}
    assert (
        rows["task.delete"]["reason"] == "retired"
        and rows["task.delete"]["words"] == "deleted task"
    )
    assert len(rows) == AuditEntry.platform.count() == 2


def test_a_bad_reason_is_a_400_and_changes_nothing(api, task):
    queued = add_execution(task, minutes_ago=0, status=ExecutionStatus.QUEUED)
    for body in ({"note": "x" * 2001}, {"reason": "misspelt key"}, {"note": ["a list"]}):
        response = api.post(f"/api/v1/executions/{queued.id}/cancel", body, format="json")
        assert response.status_code == 400, body
    assert TaskExecution.platform.get(id=queued.id).status == ExecutionStatus.QUEUED
    assert not AuditEntry.platform.exists()


def test_an_edit_records_only_the_fields_it_changed(api, task):
    response = api.patch(
        f"/api/v1/tasks/{task.id}", {"description": "now described"}, format="json"
    )
    assert response.status_code == 200
    [row] = _results(api, "?verb=task.update")
    assert row["before"] == {"description": task.description}
    assert row["after"] == {"description": "now described"} and row["words"] == "edited task"
    # Saved again as it is: nothing changed, nothing audited.
    again = api.patch(f"/api/v1/tasks/{task.id}", {"description": "now described"}, format="json")
    assert again.status_code == 200 and AuditEntry.platform.count() == 1


def test_secrets_and_api_keys_are_audited_with_their_object_never_their_value(api):
    created = api.post("/api/v1/secrets", {"name": "db-pass", "value": "s3cret"}, format="json")
    assert created.status_code == 201, created.content
    [row] = _results(api)
    assert (row["verb"], row["words"]) == ("secret.create", "created secret")
    assert row["object_id"] == created.json()["id"] and "s3cret" not in str(row)
    key = api.post("/api/v1/api-keys", {"name": "ci", "role": "operator"}, format="json")
    assert key.status_code == 201, key.content
    [row] = _results(api, "?object_type=apikey")
    assert (row["verb"], row["object_id"]) == ("apikey.create", key.json()["id"])
    assert key.json()["key"] not in str(_results(api))
    assert api.delete(f"/api/v1/api-keys/{key.json()['id']}").status_code == 204
    assert [r["verb"] for r in _results(api, "?object_type=apikey")] == [
        "apikey.revoke",
        "apikey.create",
    ]
    assert AuditEntry.platform.count() == 3


def test_old_entries_read_and_filter_as_their_verb(api, tenant, task):
    audit_record(
        tenant=tenant,
        actor="user:acme-admin",
        action="task-pause.post",
        object_type="task",
        object_id=str(task.id),
        status_code=200,
    )
    api.post(f"/api/v1/tasks/{task.id}/pause", {}, format="json")
    rows = _results(api, "?verb=task.pause")
    assert [row["action"] for row in rows] == ["task.pause", "task-pause.post"]
    assert {(row["verb"], row["words"]) for row in rows} == {("task.pause", "paused task")}


def test_filters_by_actor_object_and_verb(api, tenant, task):
    other = make_task(tenant, name="other")
    api.post(f"/api/v1/tasks/{task.id}/pause", {}, format="json")
    api.post(f"/api/v1/tasks/{other.id}/trigger", {}, format="json")
    assert [r["verb"] for r in _results(api, f"?object_type=task&object_id={other.id}")] == [
        "task.trigger"
    ]
    assert [r["object_id"] for r in _results(api, "?verb=task.pause")] == [str(task.id)]
    assert len(_results(api, "?actor=user:acme-admin")) == 2
    assert _results(api, "?actor=user:someone-else") == []


def test_another_tenants_admin_sees_none_of_it(api, task, tenant_factory):
    api.post(f"/api/v1/tasks/{task.id}/pause", {"note": "secret plans"}, format="json")
    _, intruder = tenant_factory("intruder")
    theirs = jwt_client(intruder)
    assert _results(theirs) == []
    assert _results(theirs, f"?object_id={task.id}") == []
    assert _results(theirs, "?verb=task.pause") == []
    # Not even with the victim's slug in the tenant header (they are no member there).
    sneaky = jwt_client(intruder, tenant_slug="acme")
    assert sneaky.get("/api/v1/audit").status_code in (403, 404)


def test_a_viewer_and_an_operator_are_refused_as_the_api_rule_says(api, tenant, task):
    api.post(f"/api/v1/tasks/{task.id}/pause", {}, format="json")
    for role in ("viewer", "operator"):
        client, _ = member_client(tenant, role)
        response = client.get("/api/v1/audit")
        assert response.status_code == 403, role
        assert "task.pause" not in response.content.decode()


def test_an_event_that_starts_runs_is_one_entry_listing_what_it_started(api, tenant):
    make_task(tenant, name="on-upload", schedule={"type": "event", "name": "uploaded"})
    make_task(tenant, name="also-on-upload", schedule={"type": "event", "name": "uploaded"})
    response = api.post("/api/v1/events", {"name": "uploaded", "payload": {}}, format="json")
    assert response.status_code in (200, 201, 202), response.content
    [row] = _results(api)
    assert (row["verb"], row["words"], row["after"]["started"]) == (
        "event.create",
        "posted an event",
        2,
    )


def test_a_write_no_service_recorded_gets_the_apis_entry_named_as_a_verb(api):
    """The safety net for routes added later: retrying every dead letter of an empty queue
    changes no object, and is still one entry, named by its route as a verb."""
    assert api.post("/api/v1/admin/dlq/retry-all").status_code in (200, 202)
    [row] = _results(api)
    assert (row["verb"], row["words"], row["via"]) == (
        "dlq.retry-all",
        "retried every dead letter",
        "api",
    )
