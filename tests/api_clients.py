"""API clients for given users/roles, authenticated the way real callers are (JWT, API key)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scheduler_app.services.tenants import membership_set

PASSWORD = "pw-123456"


def jwt_client(user, *, tenant_slug: str | None = None) -> APIClient:
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token", {"username": user.username, "password": PASSWORD}, format="json"
    )
    assert response.status_code == 200, response.content
    headers = {"HTTP_AUTHORIZATION": f"Bearer {response.json()['access']}"}
    if tenant_slug:
        headers["HTTP_X_TENANT"] = tenant_slug
    client.credentials(**headers)
    return client


def member_client(tenant, role: str, *, username: str | None = None, staff: bool = False):
    users = get_user_model()
    user = users.objects.create_user(
        username=username or f"{tenant.slug}-as-{role}", password=PASSWORD, is_staff=staff
    )
    membership_set(tenant=tenant, user=user, role=role)
    return jwt_client(user), user


def staff_client(username: str = "platform-staff") -> APIClient:
    user = get_user_model().objects.create_user(username=username, password=PASSWORD, is_staff=True)
    return jwt_client(user)


def api_key_client(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client
