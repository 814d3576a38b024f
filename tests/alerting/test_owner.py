"""A task's and a DAG's `owner` is checked when saved: `user:<name>` a member of the tenant,
any other text one of its notification targets; otherwise a 400 naming `owner`, nothing
saved. Played by an attacker from another tenant naming the victim's user and channel: the
same 400 as for a name that does not exist, and the victim is never told anything."""

from __future__ import annotations

import pytest
from django.core import mail

from alerting.services.channels import notification_channel_create
from dags.models import Dag
from scheduler_app.models import TaskDefinition
from tests.api_clients import jwt_client

pytestmark = pytest.mark.django_db

TASK = {
    "name": "owned",
    "schedule": {"type": "manual"},
    "handler": {"type": "python", "callable": "noop"},
}
DAG = {
    "dag": "owned-dag",
    "schedule": {"type": "manual"},
    "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
}


def _refused(response, owner: str) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["field"] == "owner", body
    assert owner in body["message"]
    return body["message"]


def test_a_member_or_a_target_of_the_tenant_is_accepted(api, tenant_and_user, receiver):
    tenant, user = tenant_and_user
    notification_channel_create(
        tenant=tenant, name="on-call", kind="webhook", target="https://hooks.example.com/x"
    )
    for owner in (f"user:{user.username}", "on-call", "email://ops@example.com"):
        created = api.post(
            "/api/v1/tasks", {**TASK, "name": owner[:20], "owner": owner}, format="json"
        )
        assert created.status_code == 201, created.content
        assert created.json()["owner"] == owner


@pytest.mark.parametrize("owner", ["user:nobody", "user:", "no-such-channel", "webhook://gone"])
def test_an_owner_naming_no_one_is_a_400_naming_owner(api, owner):
    _refused(api.post("/api/v1/tasks", {**TASK, "owner": owner}, format="json"), owner)
    assert not TaskDefinition.platform.filter(name="owned").exists()
    _refused(api.post("/api/v1/dags", {**DAG, "owner": owner}, format="json"), owner)
    assert not Dag.platform.filter(name="owned-dag").exists()


def test_a_changed_owner_is_checked_too_and_a_refusal_changes_nothing(api):
    created = api.post("/api/v1/tasks", TASK, format="json")
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    _refused(
        api.patch(f"/api/v1/tasks/{task_id}", {"owner": "user:nobody"}, format="json"),
        "user:nobody",
    )
    assert TaskDefinition.platform.get(id=task_id).owner == ""


def test_another_tenants_user_and_channel_read_as_no_one(tenant_factory, receiver):
    victim, victim_admin = tenant_factory("victim")
    victim_admin.email = "victim@example.com"
    victim_admin.save(update_fields=["email"])
    notification_channel_create(
        tenant=victim, name="victim-hook", kind="webhook", target="https://hooks.example.com/v"
    )
    _attacker_tenant, attacker_admin = tenant_factory("attacker")
    attacker = jwt_client(attacker_admin)

    stolen_user = _refused(
        attacker.post(
            "/api/v1/tasks", {**TASK, "owner": f"user:{victim_admin.username}"}, format="json"
        ),
        victim_admin.username,
    )
    unknown_user = _refused(
        attacker.post("/api/v1/tasks", {**TASK, "owner": "user:nobody-at-all"}, format="json"),
        "nobody-at-all",
    )
    # The same words for the victim's admin as for a name nobody has.
    assert stolen_user.replace(victim_admin.username, "X") == unknown_user.replace(
        "nobody-at-all", "X"
    )
    stolen_channel = _refused(
        attacker.post("/api/v1/dags", {**DAG, "owner": "victim-hook"}, format="json"), "victim-hook"
    )
    assert "no channel of that name" in stolen_channel
    assert not TaskDefinition.platform.filter(name="owned").exists()
    assert mail.outbox == [] and receiver.requests == []
