"""Brute force against the three logins (the token endpoint, the dashboard's and the admin's),
played as the attacker: a (user name, address) pair that fails too often is refused, the
right password included (429 with Retry-After, or the lockout page), for a cool-off that
grows with each further lockout of the pair. And played as the bystander the review found:
one user's wrong passwords locked another user's right password from the same address for
900 s (axes read ["username", "ip_address"] as "either one"); behind an ingress that is
everyone. Time passes by ageing the recorded attempts (no sleeps). Refresh tokens work once,
die at logout, and die with a password change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.db.models import F
from django.test import Client, RequestFactory
from rest_framework.test import APIClient
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken
from rest_framework_simplejwt.tokens import RefreshToken

from api.login_throttle import client_ip, lockout_state
from scheduler_app.models import AuditEntry

PASSWORD = "pw-123456"
LIMIT = 5
COOL_OFF = 900
pytestmark = pytest.mark.django_db
HERE = "203.0.113.7"


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(seconds=COOL_OFF)
    settings.LOGIN_LOCKOUT_MAX_SECONDS = 86400
    settings.LOGIN_TRUSTED_PROXIES = 0


@pytest.fixture
def victim(db):
    return get_user_model().objects.create_user(username="victim", password=PASSWORD, is_staff=True)


@pytest.fixture
def bystander(db):
    return get_user_model().objects.create_user(
        username="bystander", password=PASSWORD, is_staff=True
    )


def _token(client: APIClient, username: str, password: str, address: str = HERE, **meta):
    return client.post(
        "/api/v1/auth/token",
        {"username": username, "password": password},
        format="json",
        REMOTE_ADDR=address,
        **meta,
    )


def _pass_time(seconds: float) -> None:
    """The clock moves on for the throttle: every recorded attempt is that much older."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=seconds))


def _fail(client, username: str, times: int, address: str = HERE) -> list[int]:
    return [_token(client, username, f"guess-{n}", address).status_code for n in range(times)]


LOGINS = {
    "token": lambda username, password, address: (
        _token(APIClient(), username, password, address).status_code
    ),
    "dashboard": lambda username, password, address: (
        Client()
        .post(
            "/dashboard/login/", {"username": username, "password": password}, REMOTE_ADDR=address
        )
        .status_code
    ),
    "admin": lambda username, password, address: (
        Client()
        .post("/admin/login/", {"username": username, "password": password}, REMOTE_ADDR=address)
        .status_code
    ),
}
SIGNED_IN = {"token": 200, "dashboard": 302, "admin": 302}
WRONG = {"token": 401, "dashboard": 200, "admin": 200}


# --- the pure rule ------------------------------------------------------------------------
def test_the_lockout_rule_doubles_per_lockout_up_to_the_cap():
    base, cap = timedelta(seconds=900), timedelta(seconds=3000)
    start = datetime(2030, 1, 1, tzinfo=UTC)

    def state(failures, after):
        return lockout_state(
            failures=failures,
            last_failure=start,
            now=start + timedelta(seconds=after),
            limit=5,
            base=base,
            cap=cap,
        )

    assert not state(4, 0).locked
    assert state(5, 0).locked and state(5, 0).retry_after == base
    assert state(5, 899).locked and not state(5, 900).locked
    assert not state(6, 0).locked and not state(9, 0).locked  # between lockouts
    assert state(10, 1799).locked and not state(10, 1800).locked  # twice as long
    assert state(15, 2999).locked and not state(15, 3000).locked  # 3600, capped at 3000
    assert not state(0, 0).locked and state(0, 0).level == 0


# --- the bystander ------------------------------------------------------------------------
@pytest.mark.parametrize("login", sorted(LOGINS))
def test_one_users_wrong_passwords_never_lock_another_user_from_the_same_address(
    login, victim, bystander
):
    attempt = LOGINS[login]
    for n in range(LIMIT * 3):  # three lockouts' worth, and attempts during them
        assert attempt("victim", f"guess-{n}", HERE) in (WRONG[login], 429)
    assert attempt("victim", PASSWORD, HERE) == 429  # the pair is locked ...
    assert attempt("bystander", PASSWORD, HERE) == SIGNED_IN[login]  # ... not the address
    assert attempt("victim", PASSWORD, "192.0.2.200") == SIGNED_IN[login]  # nor the name


@pytest.mark.parametrize("login", sorted(LOGINS))
def test_the_pair_locks_on_every_login(login, victim):
    attempt = LOGINS[login]
    for n in range(LIMIT - 1):
        assert attempt("victim", f"guess-{n}", HERE) == WRONG[login]
    assert attempt("victim", "guess-last", HERE) == 429
    assert attempt("victim", PASSWORD, HERE) == 429


def test_api_brute_force_is_refused_until_the_cool_off_passes(victim):
    client = APIClient()
    answers = _fail(client, "victim", LIMIT + 20)
    assert answers[: LIMIT - 1] == [401] * (LIMIT - 1)
    assert set(answers[LIMIT - 1 :]) == {429}
    right = _token(client, "victim", PASSWORD)
    assert right.status_code == 429 and "access" not in right.json()
    assert int(right["Retry-After"]) == COOL_OFF
    assert right.json()["code"] == "login_locked"
    assert f"try again in {COOL_OFF} s" in right.json()["message"]
    # The twenty refused attempts were not counted and did not extend it: the wait shrinks.
    _pass_time(600)
    # Less by the real seconds the requests above took (a second or two on a loaded machine).
    assert (
        COOL_OFF - 600 - 3
        <= int(_token(client, "victim", PASSWORD)["Retry-After"])
        <= (COOL_OFF - 600)
    )
    _pass_time(COOL_OFF - 600)
    assert _token(client, "victim", PASSWORD).status_code == 200


def test_each_further_lockout_of_the_pair_lasts_twice_as_long_up_to_the_cap(settings, victim):
    settings.LOGIN_LOCKOUT_MAX_SECONDS = 3000
    client = APIClient()
    for lockout, cool_off in enumerate((COOL_OFF, 2 * COOL_OFF, 3000), start=1):
        answers = _fail(client, "victim", LIMIT)
        assert answers[-1] == 429, (lockout, answers)
        assert answers[:-1] == [401] * (LIMIT - 1), (lockout, answers)
        locked = _token(client, "victim", PASSWORD)
        assert (locked.status_code, int(locked["Retry-After"])) == (429, cool_off), lockout
        _pass_time(cool_off - 1)
        assert _token(client, "victim", PASSWORD).status_code == 429
        _pass_time(1)
    # Through it all, another user of the same address signed in whenever they liked.
    get_user_model().objects.create_user(username="neighbour", password=PASSWORD)
    assert _token(client, "neighbour", PASSWORD).status_code == 200


def test_a_success_forgets_the_pair(victim):
    client = APIClient()
    assert _fail(client, "victim", LIMIT - 1) == [401] * (LIMIT - 1)
    assert _token(client, "victim", PASSWORD).status_code == 200
    assert _fail(client, "victim", LIMIT - 1) == [401] * (LIMIT - 1)  # a fresh count
    assert _token(client, "victim", PASSWORD).status_code == 200


def test_a_pair_is_forgotten_after_the_longest_cool_off(settings, victim):
    settings.LOGIN_LOCKOUT_MAX_SECONDS = 7200
    client = APIClient()
    assert _fail(client, "victim", LIMIT)[-1] == 429
    _pass_time(7201)
    assert _fail(client, "victim", LIMIT - 1) == [401] * (LIMIT - 1)  # level 1 again, not 2
    assert AccessAttempt.objects.get().failures_since_start == LIMIT - 1


def test_a_lockout_is_in_the_audit_log_once(victim):
    client = APIClient()
    _fail(client, "victim", LIMIT + 10)
    [entry] = AuditEntry.platform.filter(action="auth.lockout")
    assert entry.actor == "user:victim"
    assert entry.status_code == 429
    assert entry.detail["ip_address"] == HERE
    assert entry.detail["path"] == "/api/v1/auth/token"


@pytest.mark.parametrize("path", ["/dashboard/login/", "/admin/login/"])
def test_browser_logins_show_a_lockout_page(path, victim):
    client = Client()
    for n in range(LIMIT):
        client.post(path, {"username": "victim", "password": f"guess-{n}"}, REMOTE_ADDR=HERE)
    response = client.post(path, {"username": "victim", "password": PASSWORD}, REMOTE_ADDR=HERE)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == COOL_OFF
    assert b"Too many failed sign-ins" in response.content
    assert "_auth_user_id" not in client.session


def test_a_few_typos_do_not_lock(victim):
    client = APIClient()
    for n in range(LIMIT - 2):
        assert _token(client, "victim", f"typo-{n}").status_code == 401
    assert _token(client, "victim", PASSWORD).status_code == 200


# --- which address is the client's ---------------------------------------------------------
@pytest.mark.parametrize(
    ("proxies", "remote", "forwarded", "expected"),
    [
        (0, "10.0.0.9", "", "10.0.0.9"),
        (0, "10.0.0.9", "198.51.100.7", "10.0.0.9"),  # nobody trusted: the header is ignored
        (1, "10.0.0.9", "198.51.100.7", "198.51.100.7"),  # the ingress saw the client
        (1, "10.0.0.9", "6.6.6.6, 198.51.100.7", "198.51.100.7"),  # a spoofed entry before
        (2, "10.0.0.9", "6.6.6.6, 198.51.100.7, 10.0.0.5", "198.51.100.7"),  # CDN, then ingress
        (2, "10.0.0.9", "198.51.100.7", "10.0.0.9"),  # fewer entries: it bypassed a proxy
        (1, "10.0.0.9", "not-an-address", "10.0.0.9"),
        (1, "10.0.0.9", "2001:db8::1", "2001:db8::1"),
    ],
)
def test_the_client_address_behind_n_trusted_proxies(
    settings, proxies, remote, forwarded, expected
):
    settings.LOGIN_TRUSTED_PROXIES = proxies
    meta = {"REMOTE_ADDR": remote}
    if forwarded:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    assert client_ip(RequestFactory().get("/", **meta)) == expected


def test_behind_the_ingress_a_client_cannot_spoof_a_fresh_pair_per_guess(settings, victim):
    """The pair only holds if the address is the client's: rotating a forged X-Forwarded-For
    entry must not give the attacker a new count per guess."""
    settings.LOGIN_TRUSTED_PROXIES = 1
    ingress, attacker, owner = "10.1.0.2", "198.51.100.66", "192.0.2.10"
    client = APIClient()
    for n in range(LIMIT):
        # What the ingress passes on: the attacker's forged entry, then the address it saw.
        forged = f"203.0.113.{n}, {attacker}"
        _token(client, "victim", f"guess-{n}", ingress, HTTP_X_FORWARDED_FOR=forged)
    spoofed = _token(
        client, "victim", PASSWORD, ingress, HTTP_X_FORWARDED_FOR=f"203.0.113.99, {attacker}"
    )
    assert spoofed.status_code == 429
    assert AccessAttempt.objects.get().ip_address == attacker
    # The owner, behind the same ingress (the same REMOTE_ADDR), is not locked out.
    assert _token(client, "victim", PASSWORD, ingress, HTTP_X_FORWARDED_FOR=owner).status_code == (
        200
    )


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
