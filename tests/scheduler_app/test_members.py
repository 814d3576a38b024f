"""Members join by invitation, played as a tenant admin who tries to enrol others: another
tenant's user and the superuser become members only if they accept; the answer for an
existing and an unknown user name is the same; new users' passwords meet the validators."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scheduler_app.models import MemberInvitation, TenantMembership
from scheduler_app.services.api_keys import api_key_create
from tests.api_clients import PASSWORD, api_key_client, jwt_client

pytestmark = pytest.mark.django_db
STRONG = "Correct-Horse-Battery-2026"
VOLATILE = {"id", "created_at", "expires_at"}


def _invite(client: APIClient, username: str, **extra):
    return client.post(
        "/api/v1/members", {"username": username, "role": "admin", **extra}, format="json"
    )


def _stable(response) -> tuple[int, dict]:
    body = response.json()
    return response.status_code, {
        k: (v if k not in VOLATILE else type(v).__name__)
        for k, v in body.items()
        if k != "username"
    }


def test_another_tenants_user_is_invited_not_enrolled(api, tenant, tenant_factory):
    _, other_admin = tenant_factory("bravo")
    response = _invite(api, other_admin.username)
    assert response.status_code == 202
    assert response.json()["status"] == "invited"
    assert not TenantMembership.objects.filter(tenant=tenant, user=other_admin).exists()
    listed = [row["username"] for row in api.get("/api/v1/members").json()["results"]]
    assert other_admin.username not in listed
    # The victim's token still acts for their own tenant only.
    victim = jwt_client(other_admin)
    assert victim.get("/api/v1/members").status_code == 200
    assert victim.get("/api/v1/members", HTTP_X_TENANT=tenant.slug).status_code == 403
    # Until they accept: then they are a member, with the offered role.
    [invitation] = victim.get("/api/v1/invitations").json()["results"]
    assert invitation["tenant"] == tenant.slug
    accepted = victim.post(f"/api/v1/invitations/{invitation['id']}/accept")
    assert accepted.status_code == 200
    assert TenantMembership.objects.get(tenant=tenant, user=other_admin).role == "admin"


def test_the_superuser_cannot_be_enrolled_without_consent(api, tenant):
    root = get_user_model().objects.create_superuser(username="root", password=PASSWORD)
    assert _invite(api, "root").status_code == 202
    assert not TenantMembership.objects.filter(user=root).exists()
    # The tenant admin cannot accept in the superuser's place.
    invitation = MemberInvitation.objects.get(username="root")
    assert api.post(f"/api/v1/invitations/{invitation.id}/accept").status_code == 404
    assert not TenantMembership.objects.filter(user=root).exists()
    # Declining removes it.
    root_client = jwt_client(root)
    assert root_client.post(f"/api/v1/invitations/{invitation.id}/decline").status_code == 204
    assert not MemberInvitation.objects.filter(id=invitation.id).exists()


def test_existing_and_unknown_user_names_get_the_same_answer(api, tenant):
    get_user_model().objects.create_user(username="exists", password=PASSWORD)
    assert _stable(_invite(api, "exists")) == _stable(_invite(api, "no-such-user"))
    # With a password too (it would create the unknown one; the existing one is untouched) ...
    assert _stable(_invite(api, "exists", password=STRONG)) == _stable(
        _invite(api, "created-now", password=STRONG)
    )
    assert get_user_model().objects.get(username="exists").check_password(PASSWORD)
    # ... and a weak password is refused the same way for both, before anything is looked up.
    weak_existing = _invite(api, "exists", password="123")
    weak_unknown = _invite(api, "unknown-2", password="123")
    assert weak_existing.status_code == weak_unknown.status_code == 400
    assert weak_existing.json() == weak_unknown.json()
    assert weak_existing.json()["field"] == "password"
    assert not get_user_model().objects.filter(username="unknown-2").exists()


@pytest.mark.parametrize(
    "password", ["short-1", "password1234", "12345678901234", "wonderful-wonderful"]
)
def test_new_users_passwords_go_through_the_validators(api, password):
    response = _invite(api, "wonderful-wonderful", password=password)
    assert response.status_code == 400, password
    assert response.json()["field"] == "password"
    assert not get_user_model().objects.filter(username="wonderful-wonderful").exists()


def test_a_user_created_later_under_an_invited_name_cannot_accept(api, tenant, tenant_factory):
    assert _invite(api, "ghost").status_code == 202  # no such user yet
    _, bravo_admin = tenant_factory("bravo")
    bravo = jwt_client(bravo_admin)
    assert _invite(bravo, "ghost", password=STRONG).status_code == 202  # creates it
    ghost = APIClient()
    token = ghost.post(
        "/api/v1/auth/token", {"username": "ghost", "password": STRONG}, format="json"
    ).json()["access"]
    ghost.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    invitations = ghost.get("/api/v1/invitations").json()["results"]
    assert [row["tenant"] for row in invitations] == ["bravo"]
    acme_invitation = MemberInvitation.objects.get(tenant=tenant, username="ghost")
    assert ghost.post(f"/api/v1/invitations/{acme_invitation.id}/accept").status_code == 404
    assert not TenantMembership.objects.filter(tenant=tenant, user__username="ghost").exists()


def test_admins_list_and_revoke_their_invitations(api, tenant):
    invited = _invite(api, "someone").json()
    rows = api.get("/api/v1/members/invitations").json()["results"]
    assert [row["username"] for row in rows] == ["someone"]
    assert api.delete(f"/api/v1/members/invitations/{invited['id']}").status_code == 204
    assert api.get("/api/v1/members/invitations").json()["results"] == []


def test_an_api_key_cannot_accept_invitations(tenant):
    _, raw = api_key_create(tenant=tenant, name="machine", role="admin")
    assert api_key_client(raw).get("/api/v1/invitations").status_code == 403


def test_the_dashboard_lists_and_accepts_invitations(api, tenant, client):
    user = get_user_model().objects.create_user(username="dash-user", password=PASSWORD)
    assert _invite(api, "dash-user").status_code == 202
    client.force_login(user)
    assert client.get("/dashboard/").status_code == 404  # no membership yet
    page = client.get("/dashboard/invitations")
    assert page.status_code == 200 and tenant.slug.encode() in page.content
    invitation = MemberInvitation.objects.get(username="dash-user")
    response = client.post(f"/dashboard/invitations/{invitation.id}/accept")
    assert response.status_code == 302
    assert TenantMembership.objects.get(tenant=tenant, user=user).role == "admin"
    assert client.get("/dashboard/").status_code == 200


def test_the_dashboard_does_not_accept_someone_elses_invitation(api, client):
    get_user_model().objects.create_user(username="target", password=PASSWORD)
    assert _invite(api, "target").status_code == 202
    intruder = get_user_model().objects.create_user(username="intruder", password=PASSWORD)
    client.force_login(intruder)
    invitation = MemberInvitation.objects.get(username="target")
    assert client.post(f"/dashboard/invitations/{invitation.id}/accept").status_code == 404
    assert not TenantMembership.objects.filter(user=intruder).exists()
