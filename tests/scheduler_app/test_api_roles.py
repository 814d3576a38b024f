"""Roles (viewer/operator/admin) through the one permission class; API keys; platform staff."""

from __future__ import annotations

import hashlib

import pytest
from django.urls import get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from api.permissions import required_role
from scheduler_app.models import ApiKey, AuditEntry, TaskDefinition
from tests.api_clients import api_key_client, member_client, staff_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db

TASK = {
    "name": "t1",
    "schedule": {"type": "manual"},
    "handler": {"type": "python", "callable": "noop"},
}


@pytest.fixture
def clients(tenant):
    return {role: member_client(tenant, role)[0] for role in ("viewer", "operator", "admin")}


def test_viewer_reads_but_cannot_trigger_or_create(tenant, clients):
    task = make_task(tenant, name="t0", schedule={"type": "manual"})
    viewer = clients["viewer"]
    assert viewer.get("/api/v1/tasks").status_code == 200
    assert viewer.get(f"/api/v1/tasks/{task.id}").status_code == 200
    assert viewer.get("/api/v1/executions").status_code == 200
    assert viewer.post(f"/api/v1/tasks/{task.id}/trigger", {}, format="json").status_code == 403
    assert viewer.post(f"/api/v1/tasks/{task.id}/pause").status_code == 403
    assert viewer.post("/api/v1/tasks", TASK, format="json").status_code == 403
    assert viewer.get("/api/v1/secrets").status_code == 403
    assert TaskDefinition.platform.filter(name="t1").count() == 0


def test_operator_triggers_pauses_but_cannot_edit_or_delete(tenant, clients):
    task = make_task(tenant, name="t0", schedule={"type": "manual"})
    operator = clients["operator"]
    assert operator.post(f"/api/v1/tasks/{task.id}/trigger", {}, format="json").status_code == 202
    assert operator.post(f"/api/v1/tasks/{task.id}/pause").status_code == 200
    assert operator.post(f"/api/v1/tasks/{task.id}/resume").status_code == 200
    assert (
        operator.patch(f"/api/v1/tasks/{task.id}", {"priority": 1}, format="json").status_code
        == 403
    )
    assert operator.delete(f"/api/v1/tasks/{task.id}").status_code == 403
    assert (
        operator.post("/api/v1/secrets", {"name": "a", "value": "b"}, format="json").status_code
        == 403
    )
    assert operator.post("/api/v1/members", {"role": "admin"}, format="json").status_code == 403


def test_admin_creates_edits_deletes_and_manages_keys(tenant, clients):
    admin = clients["admin"]
    created = admin.post("/api/v1/tasks", TASK, format="json")
    assert created.status_code == 201
    task_id = created.json()["id"]
    assert (
        admin.patch(f"/api/v1/tasks/{task_id}", {"priority": 1}, format="json").status_code == 200
    )
    assert admin.delete(f"/api/v1/tasks/{task_id}").status_code == 204
    assert admin.get("/api/v1/api-keys").status_code == 200


def test_every_route_declares_a_valid_role_and_unsafe_defaults_to_admin():
    """Covers views added on any branch: the DRF default applies the one permission class."""
    checked = 0
    for pattern in _api_patterns(get_resolver().url_patterns, ""):
        view_class = getattr(pattern.callback, "view_class", None) or getattr(
            pattern.callback, "cls", None
        )
        if not (isinstance(view_class, type) and issubclass(view_class, APIView)):
            continue
        # The login, refresh and logout endpoints (simplejwt's views and our subclasses of
        # them) are open by design: the credentials are in the body. The API root lists
        # route templates only (no ids, no tenant data) and answers GET alone.
        if view_class.__module__.startswith(
            ("rest_framework_simplejwt", "drf_spectacular", "api.views_auth")
        ):
            continue
        if pattern.name == "api-root":
            assert set(view_class().allowed_methods) <= {"GET", "HEAD", "OPTIONS"}
            continue
        view = view_class()
        classes = [type(permission).__name__ for permission in view.get_permissions()]
        assert classes == ["TenantRolePermission"], (pattern, classes)
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            if hasattr(view, method.lower()):
                assert required_role(view, method) in ("operator", "admin")
        checked += 1
    assert checked >= 15


def _api_patterns(patterns, prefix):
    for pattern in patterns:
        if hasattr(pattern, "url_patterns"):
            yield from _api_patterns(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield pattern


def test_unsafe_method_without_write_role_is_admin_only():
    class Bare(APIView):
        def post(self, request):  # pragma: no cover
            return None

    assert required_role(Bare(), "POST") == "admin"
    assert required_role(Bare(), "GET") == "viewer"


def test_api_key_is_shown_once_stored_hashed_revocable_and_tracks_last_use(tenant, api):
    created = api.post("/api/v1/api-keys", {"name": "ci", "role": "operator"}, format="json")
    assert created.status_code == 201, created.content
    raw = created.json()["key"]
    key = ApiKey.platform.get(id=created.json()["id"])
    assert key.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiKey.platform.values().get(id=key.id))
    listed = api.get(f"/api/v1/api-keys/{key.id}").json()
    assert "key" not in listed and listed["last_used_at"] is None

    machine = api_key_client(raw)
    task = make_task(tenant, name="k", schedule={"type": "manual"})
    assert machine.post(f"/api/v1/tasks/{task.id}/trigger", {}, format="json").status_code == 202
    assert machine.delete(f"/api/v1/tasks/{task.id}").status_code == 403  # operator key
    key.refresh_from_db()
    assert key.last_used_at is not None
    assert AuditEntry.platform.filter(actor=f"apikey:{key.prefix}", action="task.trigger").exists()

    assert api.delete(f"/api/v1/api-keys/{key.id}").status_code == 204
    assert machine.get("/api/v1/tasks").status_code == 401
    assert api_key_client(raw[:-2] + "xx").get("/api/v1/tasks").status_code == 401


def test_platform_staff_see_every_tenant_in_admin_endpoints_others_do_not(tenant_factory):
    tenant_a, _ = tenant_factory("aaa")
    tenant_b, _ = tenant_factory("bbb")
    make_task(tenant_a, name="a")
    make_task(tenant_b, name="b")
    staff = staff_client()
    assert staff.get("/api/v1/admin/metrics").json()["tenant"] is None
    assert staff.get("/api/v1/admin/metrics?tenant=bbb").json()["tenant"] == "bbb"
    assert staff.get("/api/v1/admin/dlq").status_code == 200
    assert staff.get("/api/v1/audit").status_code == 200
    assert staff.get("/api/v1/tasks").status_code == 403  # staff is no member of any tenant
    admin_a, _ = member_client(tenant_a, "admin", username="a-admin2")
    assert admin_a.get("/api/v1/admin/metrics?tenant=bbb").json()["tenant"] == "aaa"
    assert admin_a.post("/api/v1/admin/scheduler/failover").status_code == 403


def test_members_are_managed_by_admins_and_the_last_admin_stays(tenant, api):
    password = "a-long-Passphrase-2026"
    added = api.post("/api/v1/members", {"role": "viewer"}, format="json")
    assert added.status_code == 201, added.content  # an invitation (tests/.../test_members.py)
    accepted = APIClient().post(
        "/api/v1/invitations/accept",
        {"token": added.json()["token"], "username": "newbie", "password": password},
        format="json",
    )
    assert accepted.status_code == 201, accepted.content
    member_id = accepted.json()["member_id"]
    assert (
        api.patch(f"/api/v1/members/{member_id}", {"role": "operator"}, format="json").json()[
            "role"
        ]
        == "operator"
    )
    members = api.get("/api/v1/members").json()["results"]
    admin_row = next(row for row in members if row["role"] == "admin")
    assert api.delete(f"/api/v1/members/{admin_row['id']}").status_code == 409
    assert api.delete(f"/api/v1/members/{member_id}").status_code == 204


def test_session_auth_works_for_the_browser(tenant_and_user, client):
    _, user = tenant_and_user
    client.force_login(user)
    assert client.get("/api/v1/tasks").status_code == 200
