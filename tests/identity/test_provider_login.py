"""The dashboard's "Log in with <provider>": the code flow against the real provider
(tests/oidc_provider.py) through the test client, the memberships set from the groups at
every login, the refusal page, the takeover a matching e-mail address must not be, and
password login switched off for all but break-glass superusers."""

from __future__ import annotations

import urllib.parse

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from identity.grants import group_roles_parse
from identity.models import ProviderIdentity
from identity.services import ProviderLoginRefused, provider_login_sync
from identity.tokens import PROVIDER
from scheduler_app.choices import Role
from scheduler_app.models import TenantMembership
from scheduler_app.services.tenants import membership_set, tenant_create
from tests.oidc_provider import GROUP_ROLES

pytestmark = pytest.mark.django_db

CALLBACK = "http://testserver/dashboard/sso/callback"
BACKENDS = [
    "api.login_throttle.LoginThrottleBackend",
    "identity.backends.LocalPasswordBackend",
    "dashboard.sso.ProviderLoginBackend",
]


@pytest.fixture
def sso(oidc_provider):
    oidc_provider.redirect_uri_add(CALLBACK)
    PROVIDER.forget()
    with override_settings(
        AUTHENTICATION_BACKENDS=BACKENDS,
        **oidc_provider.settings(OIDC_GROUP_ROLES=group_roles_parse(GROUP_ROLES)),
    ):
        yield oidc_provider
    PROVIDER.forget()


@pytest.fixture
def demo(db):
    tenant_create(slug="beta")
    return tenant_create(slug="demo")


def _provider_login(sso, username: str) -> tuple[Client, object]:
    client = Client()
    start = client.get("/dashboard/sso/login?next=/dashboard/tasks")
    assert start.status_code == 302
    authorize = start["Location"]
    query = urllib.parse.parse_qs(urllib.parse.urlparse(authorize).query)
    assert authorize.startswith(f"{sso.issuer}/authorize/")
    assert query["code_challenge_method"] == ["S256"] and query["redirect_uri"] == [CALLBACK]
    back = sso.sign_in_for_code(authorize, username, CALLBACK)
    return client, client.get(back.removeprefix("http://testserver"))


def test_an_ops_user_lands_as_operator_and_a_user_without_a_mapped_group_is_refused(sso, demo):
    page = Client().get("/dashboard/login/")
    assert b'id="sso-login"' in page.content and b"Log in with SSO" in page.content
    client, landed = _provider_login(sso, "olivia")
    assert landed.status_code == 302 and landed["Location"] == "/dashboard/tasks"
    user = get_user_model().objects.get(provider_identity__issuer=sso.issuer)
    assert user.username == "olivia" and not user.is_staff
    assert list(
        TenantMembership.platform.filter(user=user).values_list("tenant__slug", "role")
    ) == [("demo", Role.OPERATOR)]
    assert client.get("/dashboard/tasks").status_code == 200
    # An operator is refused an admin's page.
    assert client.get("/dashboard/members").status_code == 403

    nobody, refused = _provider_login(sso, "nora")
    assert refused.status_code == 403
    assert b"in no group that this installation maps to a tenant" in refused.content
    assert "_auth_user_id" not in nobody.session
    assert nobody.get("/dashboard/tasks").status_code == 302  # to the login page
    assert not ProviderIdentity.objects.filter(user__username="nora").exists()


def test_refused_provider_logins_do_not_lock_an_address_out_of_single_sign_on(sso, demo):
    """People in no mapped group are refused by this installation, not by a password: were
    they counted as failed logins (no user name: one pair per address), a few of them behind
    one office address would lock everyone there out of the button."""
    with override_settings(AXES_FAILURE_LIMIT=2):
        for _ in range(3):
            assert _provider_login(sso, "nora")[1].status_code == 403
        client, landed = _provider_login(sso, "olivia")
    assert landed.status_code == 302 and "_auth_user_id" in client.session


def _claims(groups: list[str], **more: object) -> dict[str, object]:
    return {"sub": "subject-7", "preferred_username": "pat", "groups": groups, **more}


def _roles(user) -> dict[str, str]:
    return dict(TenantMembership.platform.filter(user=user).values_list("tenant__slug", "role"))


def test_every_login_sets_the_role_from_the_groups_and_a_removed_user_loses_it(sso, demo):
    beta = tenant_create(slug="elsewhere")  # a tenant the mapping does not name
    login = provider_login_sync(claims=_claims(["ops"]))
    membership_set(tenant=beta, user=login.user, role=Role.ADMIN)  # an invitation, say
    assert provider_login_sync(claims=_claims(["viewers"])).user == login.user
    assert _roles(login.user) == {"demo": Role.VIEWER, "elsewhere": Role.ADMIN}
    assert provider_login_sync(claims=_claims(["ops", "admins"])).grants[0][1] == Role.ADMIN
    with pytest.raises(ProviderLoginRefused):
        provider_login_sync(claims=_claims(["marketing"]))
    assert _roles(login.user) == {"elsewhere": Role.ADMIN}


def test_a_provider_user_with_a_local_superusers_email_gets_an_account_of_their_own(sso, demo):
    """The takeover: matching accounts by e-mail (the library's default) would log whoever
    sets `root@example.com` at the provider in as the local superuser."""
    users = get_user_model().objects
    root = users.create_superuser(username="root", email="root@example.com", password="pw-123456")
    login = provider_login_sync(
        claims=_claims(["ops"], email="root@example.com", preferred_username="root")
    )
    assert login.user != root
    assert login.user.username.startswith("root-")
    assert not (login.user.is_superuser or login.user.is_staff)
    assert list(TenantMembership.platform.filter(user=root)) == []


def test_local_login_off_leaves_passwords_to_superusers_only(sso, demo):
    users = get_user_model().objects
    operator = users.create_user(username="local-op", password="pw-123456")
    membership_set(tenant=demo, user=operator, role=Role.OPERATOR)
    users.create_superuser(username="break-glass", email="", password="pw-123456")
    earlier = Client().post(
        "/api/v1/auth/token",
        {"username": "local-op", "password": "pw-123456"},
        content_type="application/json",
    )
    assert earlier.status_code == 200
    with override_settings(OIDC_LOCAL_LOGIN=False):
        # A refresh token a password got before is refused at its next use.
        refreshed = Client().post(
            "/api/v1/auth/token/refresh",
            {"refresh": earlier.json()["refresh"]},
            content_type="application/json",
        )
        assert refreshed.status_code == 401 and "access" not in refreshed.json()
        assert "password login is off" in refreshed.content.decode()
        client = Client()
        page = client.get("/dashboard/login/")
        assert b"Break-glass sign-in (superusers only)" in page.content
        for username, expected in (("local-op", 400), ("break-glass", 200)):
            token = client.post(
                "/api/v1/auth/token",
                {"username": username, "password": "pw-123456"},
                content_type="application/json",
            )
            assert token.status_code in ((expected,) if expected == 200 else (400, 401))
        form = client.post("/dashboard/login/", {"username": "local-op", "password": "pw-123456"})
        assert form.status_code == 200 and b"Wrong user name or password" in form.content
        assert "_auth_user_id" not in client.session
        admin = client.post("/admin/login/", {"username": "break-glass", "password": "pw-123456"})
        assert admin.status_code == 302 and "_auth_user_id" in client.session
    # On (the default), the same password works as before.
    assert Client().login(username="local-op", password="pw-123456")
