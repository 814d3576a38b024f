"""Brute force against the three logins, played as the attacker: after a few failures the
right password is refused too (429 with Retry-After, or the lockout page) until the window has
passed, per user name and per client address; the lockout is in the audit log. Refresh tokens
work once, die at logout, and die with a password change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.db.models import F
from django.test import Client
from rest_framework.test import APIClient
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken
from rest_framework_simplejwt.tokens import RefreshToken

from scheduler_app.models import AuditEntry

PASSWORD = "pw-123456"
LIMIT = 5
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


@pytest.fixture
def victim(db):
    return get_user_model().objects.create_user(username="victim", password=PASSWORD)


def _token(client: APIClient, username: str, password: str, address: str = "203.0.113.7"):
    return client.post(
        "/api/v1/auth/token",
        {"username": username, "password": password},
        format="json",
        REMOTE_ADDR=address,
    )


def test_api_brute_force_is_refused_until_the_window_passes(settings, victim):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=2)
    client = APIClient()
    answers = [_token(client, "victim", f"guess-{n}").status_code for n in range(LIMIT + 20)]
    assert answers[: LIMIT - 1] == [401] * (LIMIT - 1)
    assert set(answers[LIMIT:]) == {429}
    right = _token(client, "victim", PASSWORD)
    assert right.status_code == 429
    assert "access" not in right.json()
    assert int(right["Retry-After"]) == 2
    assert right.json()["code"] == "login_locked"
    assert "try again in 2 s" in right.json()["message"]
    # Every attempt restarts the window; once it has passed with none, the owner gets in.
    # The window passes on axes' records (what it reads the time of every attempt from)
    # instead of on the wall clock: each attempt is made 2.5 s older.
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=2.5))
    assert _token(client, "victim", PASSWORD).status_code == 200


def test_the_user_name_is_locked_from_every_address(victim):
    client = APIClient()
    for n in range(LIMIT):
        _token(client, "victim", f"guess-{n}", address=f"198.51.100.{n}")
    assert _token(client, "victim", PASSWORD, address="192.0.2.200").status_code == 429


def test_one_address_spraying_many_user_names_is_locked(victim):
    client = APIClient()
    for n in range(LIMIT):
        _token(client, f"someone-{n}", "Winter2026!")
    # The sprayer's address is locked even for a user name it never tried ...
    assert _token(client, "victim", PASSWORD).status_code == 429
    # ... while the owner, from elsewhere, still gets in.
    assert _token(client, "victim", PASSWORD, address="192.0.2.9").status_code == 200


def test_a_lockout_is_in_the_audit_log(victim):
    client = APIClient()
    for n in range(LIMIT + 1):
        _token(client, "victim", f"guess-{n}")
    entry = AuditEntry.objects.filter(action="auth.lockout").latest("id")
    assert entry.actor == "user:victim"
    assert entry.status_code == 429
    assert entry.detail["ip_address"] == "203.0.113.7"
    assert entry.detail["path"] == "/api/v1/auth/token"


@pytest.mark.parametrize("path", ["/dashboard/login/", "/admin/login/"])
def test_browser_logins_show_a_lockout_page(path, victim):
    victim.is_staff = True
    victim.save()
    client = Client()
    for n in range(LIMIT):
        client.post(path, {"username": "victim", "password": f"guess-{n}"}, REMOTE_ADDR="10.9.8.7")
    response = client.post(
        path, {"username": "victim", "password": PASSWORD}, REMOTE_ADDR="10.9.8.7"
    )
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 900
    assert b"Too many failed sign-ins" in response.content
    assert "_auth_user_id" not in client.session


def test_a_few_typos_do_not_lock(victim):
    client = APIClient()
    for n in range(LIMIT - 2):
        assert _token(client, "victim", f"typo-{n}").status_code == 401
    assert _token(client, "victim", PASSWORD).status_code == 200


# --- refresh tokens ----------------------------------------------------------------------
def _pair(client: APIClient) -> dict:
    response = _token(client, "victim", PASSWORD)
    assert response.status_code == 200, response.content
    return response.json()


def _refresh(client: APIClient, refresh: str):
    return client.post("/api/v1/auth/token/refresh", {"refresh": refresh}, format="json")


def test_a_refresh_token_works_once(victim):
    client = APIClient()
    first = _pair(client)["refresh"]
    rotated = _refresh(client, first)
    assert rotated.status_code == 200
    assert rotated.json()["refresh"] != first
    assert _refresh(client, first).status_code == 401  # replayed: blacklisted on use
    assert _refresh(client, rotated.json()["refresh"]).status_code == 200


def test_a_logged_out_refresh_token_is_refused(victim):
    client = APIClient()
    refresh = _pair(client)["refresh"]
    assert (
        client.post("/api/v1/auth/logout", {"refresh": refresh}, format="json").status_code == 200
    )
    assert _refresh(client, refresh).status_code == 401


def test_tokens_from_before_a_password_change_are_refused(victim):
    client = APIClient()
    pair = _pair(client)
    victim.set_password("a-new-long-password-2026")
    victim.save()
    assert _refresh(client, pair["refresh"]).status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {pair['access']}")
    assert client.get("/api/v1/tasks").status_code == 401
    # Refused for good: it was blacklisted when it was refused.
    jti = RefreshToken(pair["refresh"], verify=False)["jti"]
    assert BlacklistedToken.objects.filter(token__jti=jti).exists()
