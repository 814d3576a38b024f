"""The dashboard's audit log page: newest first, in words, with a link to each object, what
changed and why; filtered by actor, verb and object, paginated; for whom the API's rule for
GET /api/v1/audit allows (admins), and only the tenant's own entries."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from scheduler_app.services.audit import audit_record
from scheduler_app.services.tenants import membership_set
from tests.api_clients import PASSWORD
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-entry-id="\d+" data-verb="([^"]+)"', html)


def _client_of(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_a_pause_from_the_dashboard_reads_in_words_with_its_link_change_and_reason(
    signed_in, tenant
):
    task = make_task(tenant, name="nightly")
    signed_in.post(f"/dashboard/tasks/{task.id}/pause", {"note": "warehouse migration"})
    signed_in.post(f"/dashboard/tasks/{task.id}/resume")
    page = signed_in.get("/dashboard/audit")
    assert page.status_code == 200
    html = page.content.decode()
    assert _rows(html) == ["task.resume", "task.pause"]  # newest first
    assert "paused task" in html and "resumed task" in html
    assert f'href="/dashboard/tasks/{task.id}" class="audit-object"' in html
    assert "paused: false → true" in html and "warehouse migration" in html
    assert "user:acme-admin" in html and "(dashboard)" in html
    # The nav links to it, for an admin.
    assert 'href="/dashboard/audit"' in signed_in.get("/dashboard/").content.decode()


def test_filters_by_verb_actor_and_object(signed_in, tenant):
    first, second = make_task(tenant, name="first"), make_task(tenant, name="second")
    signed_in.post(f"/dashboard/tasks/{first.id}/pause")
    signed_in.post(f"/dashboard/tasks/{second.id}/pause")
    signed_in.post(f"/dashboard/tasks/{second.id}/trigger")
    html = signed_in.get("/dashboard/audit?verb=task.pause").content.decode()
    assert _rows(html) == ["task.pause", "task.pause"]
    by_object = signed_in.get(f"/dashboard/audit?object_type=task&object_id={second.id}")
    assert _rows(by_object.content.decode()) == ["task.trigger", "task.pause"]
    assert _rows(signed_in.get("/dashboard/audit?actor=user:nobody").content.decode()) == []
    assert len(_rows(signed_in.get("/dashboard/audit?actor=user:acme-admin").content.decode())) == 3


def test_old_entries_display_in_words_and_pages_keep_the_filters(signed_in, tenant):
    for number in range(55):
        audit_record(
            tenant=tenant,
            actor="user:acme-admin",
            action="task-pause.post",
            object_type="task",
            object_id=f"old-{number}",
            status_code=200,
        )
    first = signed_in.get("/dashboard/audit?verb=task.pause").content.decode()
    assert len(_rows(first)) == 50 and "paused task" in first and "55 entries" in first
    assert 'href="?verb=task.pause&amp;page=2"' in first
    second = signed_in.get("/dashboard/audit?verb=task.pause&page=2").content.decode()
    assert len(_rows(second)) == 5 and "old-0" in second
    # A page number out of range or not a number shows a page, not an error.
    assert signed_in.get("/dashboard/audit?page=999").status_code == 200
    assert signed_in.get("/dashboard/audit?page=x").status_code == 200


def test_another_tenants_admin_sees_none_of_it(signed_in, tenant, tenant_factory):
    task = make_task(tenant, name="victim-task")
    signed_in.post(f"/dashboard/tasks/{task.id}/pause", {"note": "secret plans"})
    _, intruder = tenant_factory("intruder")
    theirs = _client_of(intruder)
    for query in ("", f"?object_id={task.id}", "?verb=task.pause", "?tenant=acme"):
        html = theirs.get(f"/dashboard/audit{query}").content.decode()
        listed = html.split('<table id="audit-entries"')[1]  # the filter echoes what was typed
        assert _rows(html) == [] and str(task.id) not in listed and "secret plans" not in html


def test_viewers_and_operators_are_refused_as_the_api_says(signed_in, tenant):
    from django.contrib.auth import get_user_model

    task = make_task(tenant, name="nightly")
    signed_in.post(f"/dashboard/tasks/{task.id}/pause", {"note": "private reason"})
    for role in ("viewer", "operator"):
        user = get_user_model().objects.create_user(username=f"as-{role}", password=PASSWORD)
        membership_set(tenant=tenant, user=user, role=role)
        client = _client_of(user)
        response = client.get("/dashboard/audit")
        assert response.status_code == 403, role
        assert "private reason" not in response.content.decode()
        assert 'href="/dashboard/audit"' not in client.get("/dashboard/").content.decode()
