"""Changes made in the Django admin are in the audit log once each: through a service (a
pause, an edit of a task) in the service's words; a plain save or delete of any other model
(a membership's role) by the admin's own log, with the fields it changed and the tenant."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

from scheduler_app.models import AuditEntry, TaskDefinition, TenantMembership
from scheduler_app.services.tenants import membership_set
from site_admin.audited import AuditedModelAdmin
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_every_model_admin_is_audited():
    """A ModelAdmin registered later is audited too: the site mixes it in."""
    unaudited = [
        type(model_admin).__name__
        for model_admin in admin.site._registry.values()
        if not isinstance(model_admin, AuditedModelAdmin)
    ]
    assert unaudited == [] and len(admin.site._registry) > 10


def test_an_admin_action_is_audited_by_its_service_once(root, tenant):
    task = make_task(tenant, name="nightly")
    response = root.post(
        "/admin/scheduler_app/taskdefinition/",
        {"action": "pause", "_selected_action": [str(task.id)]},
    )
    assert response.status_code == 302
    [entry] = AuditEntry.platform.all()
    assert (entry.action, entry.object_type, entry.object_id) == (
        "task.pause",
        "task",
        str(task.id),
    )
    assert (entry.actor, entry.tenant_id, entry.detail["via"]) == ("user:root", tenant.id, "admin")
    assert (entry.detail["before"], entry.detail["after"]) == ({"paused": False}, {"paused": True})
    assert entry.detail["reason"] == "from the admin"


def test_a_plain_save_is_audited_with_its_changed_fields_and_tenant(root, tenant):
    user = get_user_model().objects.create_user("bob", password="pw-123456")
    membership = membership_set(tenant=tenant, user=user, role="viewer")
    response = root.post(
        f"/admin/scheduler_app/tenantmembership/{membership.id}/change/",
        {"user": str(user.id), "tenant": str(tenant.id), "role": "operator"},
    )
    assert response.status_code == 302, response.content[:2000]
    assert TenantMembership.platform.get(id=membership.id).role == "operator"
    [entry] = AuditEntry.platform.all()
    assert (entry.action, entry.object_id, entry.tenant_id) == (
        "member.update",
        str(membership.id),
        tenant.id,
    )
    assert entry.detail["after"] == {"changed": ["Role"]} and entry.actor == "user:root"


def test_a_bulk_delete_writes_one_entry_per_object(root, tenant):
    users = get_user_model().objects
    members = [
        membership_set(tenant=tenant, user=users.create_user(name, password="x"), role="viewer")
        for name in ("carol", "dave")
    ]
    response = root.post(
        "/admin/scheduler_app/tenantmembership/",
        {
            "action": "delete_selected",
            "_selected_action": [str(m.id) for m in members],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not TenantMembership.platform.filter(id__in=[m.id for m in members]).exists()
    entries = AuditEntry.platform.order_by("object_id")
    assert sorted(e.object_id for e in entries) == sorted(str(m.id) for m in members)
    assert {(e.action, e.tenant_id) for e in entries} == {("member.delete", tenant.id)}


def test_a_task_deleted_in_the_admin_is_audited_once_by_the_service(root, tenant):
    task = make_task(tenant, name="to-go")
    response = root.post(f"/admin/scheduler_app/taskdefinition/{task.id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert TaskDefinition.platform.get(id=task.id).deleted_at is not None
    [entry] = AuditEntry.platform.all()  # the service's; the admin's log of it is dropped
    assert entry.action == "task.delete" and entry.detail["after"] == {"deleted": True}


def test_a_refused_admin_change_writes_nothing(client, tenant):
    staff = get_user_model().objects.create_user("nobody", password="pw-123456", is_staff=True)
    client.force_login(staff)  # staff without permissions
    task = make_task(tenant, name="kept")
    response = client.post(
        "/admin/scheduler_app/taskdefinition/",
        {"action": "pause", "_selected_action": [str(task.id)]},
    )
    assert response.status_code == 403
    assert not AuditEntry.platform.exists()
    assert not TaskDefinition.platform.get(id=task.id).paused
