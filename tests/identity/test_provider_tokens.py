"""The API accepts the identity provider's access tokens next to its own JWTs and API keys:
tokens of a real provider (tests/oidc_provider.py, django-oauth-toolkit in its own process),
checked against its JWKS. Each refusal is played as the attacker would: a token the provider
signed but that has expired or names another audience, one of another issuer, one signed by
a key that is not the provider's, `alg: none`, HS256 keyed with the public key; and a user
of tenant B's group asking for tenant A's task."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from django.test import override_settings
from rest_framework.test import APIClient

from identity.grants import group_roles_parse
from identity.models import ProviderIdentity
from identity.tokens import PROVIDER
from scheduler_app.models import TaskDefinition
from scheduler_app.services.tenants import tenant_create
from tests.factories import make_task
from tests.oidc_provider import GROUP_ROLES, private_key_pem

pytestmark = pytest.mark.django_db


@pytest.fixture
def sso(oidc_provider):
    PROVIDER.forget()
    with override_settings(
        **oidc_provider.settings(OIDC_GROUP_ROLES=group_roles_parse(GROUP_ROLES))
    ):
        yield oidc_provider
    PROVIDER.forget()


@pytest.fixture
def tenants(db):
    demo, beta = tenant_create(slug="demo"), tenant_create(slug="beta")
    return {
        "demo": make_task(demo, name="demo-payroll-export"),
        "beta": make_task(beta, name="beta-nightly"),
    }


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _names(response) -> list[str]:
    return [task["name"] for task in response.json()["results"]]


def test_provider_tokens_carry_the_mapped_tenant_and_role(sso, tenants):
    demo_task = tenants["demo"]
    viewer = _client(sso.password_token("victor"))
    response = viewer.get("/api/v1/tasks")
    assert response.status_code == 200, response.content
    assert _names(response) == ["demo-payroll-export"]
    # A viewer reads, and may not pause.
    refused = viewer.post(f"/api/v1/tasks/{demo_task.id}/pause", {}, format="json")
    assert refused.status_code == 403
    operator = _client(sso.password_token("olivia"))
    paused = operator.post(f"/api/v1/tasks/{demo_task.id}/pause", {}, format="json")
    assert paused.status_code == 200, paused.content
    # ... and an operator may not do an admin's delete.
    assert operator.delete(f"/api/v1/tasks/{demo_task.id}").status_code == 403
    assert TaskDefinition.platform.filter(id=demo_task.id).exists()
    # Each is a local account of its own, linked by (issuer, subject), none of them staff.
    identities = ProviderIdentity.objects.select_related("user").filter(issuer=sso.issuer)
    assert sorted(i.user.username for i in identities) == ["olivia", "victor"]
    assert not any(i.user.is_staff or i.user.has_usable_password() for i in identities)


def test_tenant_b_group_cannot_see_tenant_a(sso, tenants):
    mallory = _client(sso.password_token("mallory"))
    listing = mallory.get("/api/v1/tasks")
    assert listing.status_code == 200
    assert _names(listing) == ["beta-nightly"]
    stolen = mallory.get(f"/api/v1/tasks/{tenants['demo'].id}")
    assert stolen.status_code == 404
    assert "demo-payroll-export" not in stolen.content.decode()
    # Asking for tenant A by name gives nothing either.
    other = mallory.get("/api/v1/tasks", HTTP_X_TENANT="demo")
    assert other.status_code == 403
    assert "demo-payroll-export" not in other.content.decode()


def _refusal(token: str):
    response = _client(token).get("/api/v1/tasks")
    assert "demo-payroll-export" not in response.content.decode()
    return response


def test_tokens_the_provider_did_not_issue_for_us_now_are_401(sso, tenants):
    now = int(time.time())
    groups = {"groups": ["ops"], "preferred_username": "olivia"}
    # Signed by the provider's own key, but expired (beyond the clock skew) ...
    expired = sso.signed({**groups, "iat": now - 7200, "exp": now - 3600})
    assert _refusal(expired).status_code == 401
    # ... or for another client (a real token of the provider, audience `other-app`).
    foreign_audience = sso.password_token("olivia", client_id="other-app")
    assert jwt.decode(foreign_audience, options={"verify_signature": False})["aud"] == ("other-app")
    assert _refusal(foreign_audience).status_code == 401
    # Another issuer with its own key: not ours to judge, and simplejwt refuses it.
    other_key = private_key_pem()
    other_issuer = sso.signed(
        {**groups, "iss": "http://127.0.0.1:9/other"}, key_pem=other_key, kid="other"
    )
    assert _refusal(other_issuer).status_code == 401
    # Our issuer, a key that is not the provider's: under its key id and under a new one.
    assert _refusal(sso.signed(groups, key_pem=other_key)).status_code == 401
    assert _refusal(sso.signed(groups, key_pem=other_key, kid="rotated")).status_code == 401
    # Signed by the provider, but naming no one.
    assert _refusal(sso.signed({**groups, "sub": ""})).status_code == 401
    # And what the provider does sign is accepted: the refusals above are the checks.
    assert _client(sso.signed(groups, kid=sso.kid)).get("/api/v1/tasks").status_code == 200


def _unsigned(header: dict, claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}."


def test_alg_none_and_hs256_keyed_with_the_public_key_are_401(sso, tenants):
    now = int(time.time())
    claims = {
        "iss": sso.issuer,
        "sub": "1",
        "aud": "scheduler",
        "iat": now,
        "exp": now + 300,
        "groups": ["admins"],
    }
    assert _refusal(_unsigned({"alg": "none", "kid": sso.kid}, claims)).status_code == 401
    jwks = requests.get(f"{sso.issuer}/.well-known/jwks.json", timeout=10).json()
    public_jwk = json.dumps(next(k for k in jwks["keys"] if k["kid"] == sso.kid))

    def hs256(secret: bytes) -> str:
        head = {"alg": "HS256", "typ": "JWT", "kid": sso.kid}
        unsigned = _unsigned(head, claims)[:-1]
        signature = hmac.new(secret, unsigned.encode(), hashlib.sha256).digest()
        return unsigned + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()

    public_pem = (
        serialization.load_pem_private_key(sso.key_pem.encode(), password=None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for secret in (public_pem, public_jwk.encode()):
        response = _refusal(hs256(secret))
        assert response.status_code == 401
        assert "algorithm 'HS256' is not accepted" in response.content.decode()


def test_without_oidc_settings_a_provider_token_is_just_a_bad_jwt(oidc_provider, tenants):
    """Off entirely when OIDC_ISSUER is absent: simplejwt refuses what it did not sign."""
    token = oidc_provider.password_token("olivia")
    assert _refusal(token).status_code == 401
    assert not ProviderIdentity.objects.exists()
