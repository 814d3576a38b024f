"""Members join by invitation tokens, played as the attacker of the review: acme's admin, who
wants into demo. A tenant admin never creates or names a platform account; a token works
once, until it expires or is revoked, only for the tenant that issued it; the invitee's own
password is the one that works.

The takeover these pin: acme's admin created `alice.demo` with his own password (POST
/members with a free user name created the account), demo's admin then invited `alice.demo`
(the invitation bound itself to the existing account and dropped the password she was
given), and the attacker accepted and read demo's secrets.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler_app.models import AuditEntry, MemberInvitation, TenantMembership
from scheduler_app.services import invitations
from scheduler_app.services.api_keys import api_key_create
from scheduler_app.services.secrets import secret_create
from tests.api_clients import PASSWORD, api_key_client, jwt_client

pytestmark = pytest.mark.django_db
ALICE_PASSWORD = "Alice-chose-this-2026"
# The password the attacker gives the account he squats (his own login is PASSWORD).
ATTACKER_PASSWORD = "Mallory-owns-acme-77"


@pytest.fixture
def acme(tenant_factory):
    """acme, whose admin is the attacker."""
    tenant, admin = tenant_factory("acme", username="mallory")
    return tenant, admin


@pytest.fixture
def demo(tenant_factory):
    tenant, admin = tenant_factory("demo", username="demo-admin")
    secret_create(tenant=tenant, name="db-password", value="demo-crown-jewels")
    return tenant, admin


def _login(username: str, password: str) -> APIClient:
    client = APIClient()
    answer = client.post(
        "/api/v1/auth/token", {"username": username, "password": password}, format="json"
    )
    assert answer.status_code == 200, answer.content
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['access']}")
    return client


def _login_status(username: str, password: str) -> int:
    return (
        APIClient()
        .post("/api/v1/auth/token", {"username": username, "password": password}, format="json")
        .status_code
    )


def _invite(client: APIClient, role: str = "viewer", **extra):
    return client.post("/api/v1/members", {"role": role, **extra}, format="json")


def _accept(token: str, client: APIClient | None = None, **body):
    return (client or APIClient()).post(
        "/api/v1/invitations/accept", {"token": token, **body}, format="json"
    )


# --- the review's takeover, end to end -------------------------------------------------------
def test_the_cross_tenant_account_takeover_is_refused_end_to_end(acme, demo):
    _, mallory = acme
    demo_tenant, demo_admin = demo
    attacker = jwt_client(mallory)
    # 1. The old move: create `alice.demo` with his own password through POST /members.
    for body in (
        {"username": "alice.demo", "password": ATTACKER_PASSWORD, "role": "viewer"},
        {"username": "alice.demo", "role": "viewer"},
    ):
        refused = attacker.post("/api/v1/members", body, format="json")
        assert refused.status_code == 400, refused.content
        assert "does not name or create accounts" in refused.content.decode()
    assert not get_user_model().objects.filter(username="alice.demo").exists()
    assert not MemberInvitation.platform.exists()
    # 2. He gets the name anyway, the only way left: an account of his own, through an
    # invitation of his own tenant, accepted under the name he wants to squat.
    own = _invite(attacker).json()
    squatted = _accept(own["token"], username="alice.demo", password=ATTACKER_PASSWORD)
    assert squatted.status_code == 201 and squatted.json()["tenant"] == "acme"
    # 3. demo's admin invites Alice: by email, naming no account.
    invited = _invite(jwt_client(demo_admin), role="admin", email="alice@demo.example")
    assert invited.status_code == 201, invited.content
    assert invited.json()["token"] is None and invited.json()["delivery"] == "email"
    [letter] = mail.outbox
    assert letter.to == ["alice@demo.example"]
    link = next(word for word in letter.body.split() if "/dashboard/join/" in word)
    alice_token = link.rsplit("/", 1)[1]
    # 4. The squatted account is not bound to anything: logged in as alice.demo, the attacker
    # sees no invitation of demo's, cannot read, list or revoke demo's, and demo refuses him.
    squatter = _login("alice.demo", ATTACKER_PASSWORD)
    assert squatter.get("/api/v1/secrets", HTTP_X_TENANT="demo").status_code == 403
    assert attacker.get("/api/v1/members/invitations").json()["results"][0]["tenant"] == "acme"
    demo_invitation = invited.json()["id"]
    assert attacker.get(f"/api/v1/members/invitations/{demo_invitation}").status_code == 404
    assert attacker.delete(f"/api/v1/members/invitations/{demo_invitation}").status_code == 404
    # Replaying his own (used) token, or a made-up one with demo's invitation id, gets nothing.
    assert _accept(own["token"], client=squatter).status_code == 410
    assert _accept(f"inv_{'0' * 12}_{'x' * 43}", client=squatter).status_code == 404
    # 5. Alice accepts with her own account; the name he squatted is refused, not joined.
    taken = _accept(alice_token, username="alice.demo", password=ALICE_PASSWORD)
    assert taken.status_code == 409 and taken.json()["field"] == "username"
    joined = _accept(alice_token, username="alice", password=ALICE_PASSWORD)
    assert joined.status_code == 201, joined.content
    assert (joined.json()["tenant"], joined.json()["role"]) == ("demo", "admin")
    # 6. What the attacker sees now: demo's secrets are not his, from any account of his.
    for client in (attacker, squatter):
        assert client.get("/api/v1/secrets", HTTP_X_TENANT="demo").status_code == 403
    assert not TenantMembership.platform.filter(tenant=demo_tenant, user=mallory).exists()
    squatter_user = get_user_model().objects.get(username="alice.demo")
    assert not TenantMembership.platform.filter(tenant=demo_tenant, user=squatter_user).exists()
    # Alice's password is hers: it works, the attacker's does not open her account.
    alice = _login("alice", ALICE_PASSWORD)
    assert "demo-crown-jewels" not in alice.get("/api/v1/secrets").content.decode()  # masked
    assert alice.get("/api/v1/secrets").json()["results"][0]["name"] == "db-password"
    assert _login_status("alice", ATTACKER_PASSWORD) == 401
    assert _login_status("alice", PASSWORD) == 401


# --- tokens: single use, expiring, revocable, one tenant's --------------------------------------
def test_a_token_works_once(acme):
    token = _invite(jwt_client(acme[1])).json()["token"]
    first = _accept(token, username="first", password="First-person-2026")
    assert first.status_code == 201
    again = _accept(token, username="second", password="Second-person-2026")
    assert again.status_code == 410 and again.json()["field"] == "token"
    assert "already used" in again.json()["message"]
    assert not get_user_model().objects.filter(username="second").exists()
    # A signed-in person cannot reuse it either.
    other = get_user_model().objects.create_user(username="other", password=PASSWORD)
    assert _accept(token, client=jwt_client(other)).status_code == 410
    assert not TenantMembership.platform.filter(user=other).exists()


@pytest.mark.django_db(transaction=True)
def test_two_accepts_racing_on_one_token_make_one_member(tenant_factory):
    tenant, _ = tenant_factory("acme")
    issued = invitations.invitation_create(tenant=tenant, role="viewer", link_for=str)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def accept(name: str) -> None:
        barrier.wait()
        try:
            invitations.invitation_accept_new_account(
                token=issued.token, username=name, password=f"Racing-{name}-2026"
            )
            outcomes.append("joined")
        except Exception as error:
            outcomes.append(type(error).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=accept, args=(n,)) for n in ("racer-a", "racer-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["Gone", "joined"]
    assert TenantMembership.platform.filter(tenant=tenant, role="viewer").count() == 1
    assert get_user_model().objects.filter(username__startswith="racer-").count() == 1


def test_an_expired_token_is_refused(acme):
    tenant, _ = acme
    long_ago = timezone.now() - timedelta(hours=169)  # the default lifetime is 168 h
    issued = invitations.invitation_create(tenant=tenant, role="viewer", link_for=str, now=long_ago)
    answer = _accept(issued.token, username="late", password="Late-comer-2026")
    assert answer.status_code == 410 and "expired" in answer.json()["message"]
    assert not get_user_model().objects.filter(username="late").exists()
    # The lifetime is a setting; the clock is injected, nothing waits.
    fresh = invitations.invitation_create(tenant=tenant, role="viewer", link_for=str)
    assert invitations.invitation_for_token(token=fresh.token).id == fresh.invitation.id
    with pytest.raises(invitations.Gone):
        invitations.invitation_for_token(
            token=fresh.token, now=fresh.invitation.expires_at + timedelta(seconds=1)
        )


def test_a_revoked_token_is_refused(acme):
    admin = jwt_client(acme[1])
    issued = _invite(admin).json()
    assert admin.delete(f"/api/v1/members/invitations/{issued['id']}").status_code == 204
    answer = _accept(issued["token"], username="revoked", password="Revoked-person-2026")
    assert answer.status_code == 410 and "revoked" in answer.json()["message"]
    assert admin.delete(f"/api/v1/members/invitations/{issued['id']}").status_code == 409
    [row] = admin.get("/api/v1/members/invitations").json()["results"]
    assert row["status"] == "revoked"
    assert AuditEntry.platform.filter(action="invitation.revoke").count() == 1


def test_a_token_of_another_tenant_joins_only_that_tenant(acme, demo):
    acme_tenant, mallory = acme
    demo_tenant, demo_admin = demo
    acme_token = _invite(jwt_client(mallory), role="admin").json()["token"]
    demo_issued = _invite(jwt_client(demo_admin)).json()
    demo_prefix = MemberInvitation.platform.get(id=demo_issued["id"]).token_prefix
    # demo's invitation found by its prefix, with acme's secret: the same 404 as no token at
    # all (it does not even say the prefix exists).
    spliced = f"inv_{demo_prefix}_{acme_token.split('_', 2)[2]}"
    for token in (spliced, "inv_" + "f" * 12 + "_nothing", "not-a-token", "inv_" + "x" * 190):
        answer = _accept(token, username="spliced", password="Spliced-token-2026")
        assert answer.status_code == 404, (token[:20], answer.content)
        assert answer.json() == {
            "code": "not_found",
            "message": "no invitation has this token (check the link)",
            "field": "token",
            "errors": {"token": ["no invitation has this token (check the link)"]},
        }
    too_long = _accept("x" * 500, username="spliced", password="Spliced-token-2026")
    assert too_long.status_code == 400 and too_long.json()["field"] == "token"
    assert not get_user_model().objects.filter(username="spliced").exists()
    # acme's token is acme's: it makes an acme admin, nothing in demo.
    joined = _accept(acme_token, username="acme-newcomer", password="Quiet-harbour-4417")
    assert (joined.json()["tenant"], joined.json()["role"]) == ("acme", "admin")
    user = get_user_model().objects.get(username="acme-newcomer")
    assert list(user.memberships.values_list("tenant__slug", flat=True)) == ["acme"]
    # demo's invitation is untouched, and invisible to acme's admin.
    assert MemberInvitation.platform.get(id=demo_issued["id"]).status_at(timezone.now()) == (
        "pending"
    )
    listed = jwt_client(mallory).get("/api/v1/members/invitations").json()["results"]
    assert demo_issued["id"] not in {row["id"] for row in listed}
    assert acme_tenant.slug != demo_tenant.slug


# --- who chooses the password -------------------------------------------------------------------
def test_the_invitees_chosen_password_works_and_nobody_elses(acme):
    _, mallory = acme
    token = _invite(jwt_client(mallory), role="operator").json()["token"]
    assert _accept(token, username="carol", password="Carol-picked-it-2026").status_code == 201
    assert _login_status("carol", "Carol-picked-it-2026") == 200
    for guess in (ATTACKER_PASSWORD, PASSWORD, "", "Carol-picked-it-2025"):
        assert _login_status("carol", guess) in (400, 401), guess
    # The dashboard too.
    browser = Client()
    assert browser.login(username="carol", password="Carol-picked-it-2026")
    assert not Client().login(username="carol", password=ATTACKER_PASSWORD)


@pytest.mark.parametrize(
    "password", ["short-1", "password1234", "12345678901234", "carol-the-new-one"]
)
def test_the_new_accounts_password_goes_through_the_validators(acme, password):
    token = _invite(jwt_client(acme[1])).json()["token"]
    answer = _accept(token, username="carol-the-new-one", password=password)
    assert answer.status_code == 400 and answer.json()["field"] == "password"
    assert not get_user_model().objects.filter(username="carol-the-new-one").exists()
    # Refused, the token is still good.
    assert _accept(token, username="carol", password="A-good-one-for-2026").status_code == 201


def test_a_taken_user_name_is_refused_never_joined(acme):
    bob = get_user_model().objects.create_user(username="bob", password=PASSWORD)
    token = _invite(jwt_client(acme[1]), role="admin").json()["token"]
    answer = _accept(token, username="bob", password="Not-bobs-password-2026")
    assert answer.status_code == 409 and answer.json()["field"] == "username"
    bob.refresh_from_db()
    assert bob.check_password(PASSWORD) and not bob.memberships.exists()
    assert MemberInvitation.platform.get().accepted_at is None


@pytest.mark.parametrize("bad", ["", "has space", "x" * 151, "semi;colon"])
def test_a_user_name_is_checked_like_any_other(acme, bad):
    token = _invite(jwt_client(acme[1])).json()["token"]
    answer = _accept(token, username=bad, password="A-good-one-for-2026")
    assert answer.status_code == 400 and answer.json()["field"] == "username"


def test_a_signed_in_person_accepts_with_their_own_account(acme, demo):
    _, demo_admin = demo
    token = _invite(jwt_client(acme[1]), role="operator").json()["token"]
    signed_in = jwt_client(demo_admin)
    # Signed in, a user name or password is refused rather than silently dropped.
    refused = _accept(token, client=signed_in, username="someone-else", password="x")
    assert refused.status_code == 400
    joined = _accept(token, client=signed_in)
    assert joined.status_code == 200, joined.content
    assert (joined.json()["username"], joined.json()["role"]) == ("demo-admin", "operator")
    assert signed_in.get("/api/v1/tasks", HTTP_X_TENANT="acme").status_code == 200
    assert demo_admin.check_password(PASSWORD)  # untouched


def test_a_member_accepting_again_is_told_and_the_token_stays(acme):
    _, mallory = acme
    token = _invite(jwt_client(mallory)).json()["token"]
    answer = _accept(token, client=jwt_client(mallory))
    assert answer.status_code == 409
    assert MemberInvitation.platform.get().accepted_at is None


def test_an_api_key_cannot_accept(acme):
    tenant, mallory = acme
    token = _invite(jwt_client(mallory)).json()["token"]
    _, raw = api_key_create(tenant=tenant, name="machine", role="admin")
    assert _accept(token, client=api_key_client(raw)).status_code == 403
    assert MemberInvitation.platform.get().accepted_at is None


# --- shown once, stored hashed, delivered out of band ---------------------------------------------
def test_the_token_is_shown_once_and_only_its_hash_is_stored(acme):
    admin = jwt_client(acme[1])
    issued = _invite(admin, role="operator").json()
    token = issued["token"]
    assert token.startswith("inv_") and issued["delivery"] == "link"
    assert issued["accept_url"].endswith(f"/dashboard/join/{token}")
    row = MemberInvitation.platform.get(id=issued["id"])
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = " ".join(str(value) for value in MemberInvitation.platform.values().get().values())
    assert token not in stored and token.split("_", 2)[2] not in stored
    for answer in (
        admin.get("/api/v1/members/invitations"),
        admin.get(f"/api/v1/members/invitations/{issued['id']}"),
    ):
        assert answer.status_code == 200 and token not in answer.content.decode()
        assert "token" not in answer.content.decode()


def test_an_emailed_invitation_is_not_shown_to_the_admin(acme, settings):
    settings.ALERTS = {**settings.ALERTS, "BASE_URL": "https://sched.example.com"}
    settings.ALLOWED_HOSTS = ["*"]  # even where the Host header is not checked
    issued = (
        jwt_client(acme[1])
        .post(
            "/api/v1/members",
            {"role": "viewer", "email": "dave@example.com"},
            format="json",
            HTTP_HOST="attacker.example",
        )
        .json()
    )
    assert (issued["token"], issued["accept_url"], issued["delivery"]) == (None, None, "email")
    [letter] = mail.outbox
    # The configured address, never the Host header the admin's request sent.
    assert "https://sched.example.com/dashboard/join/inv_" in letter.body
    assert "attacker.example" not in letter.body
    token = letter.body.split("/dashboard/join/", 1)[1].split()[0]
    row = MemberInvitation.platform.get()
    assert row.email == "dave@example.com"
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()


def test_a_mail_that_cannot_be_sent_leaves_no_invitation(acme, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    answer = _invite(jwt_client(acme[1]), email="erin@example.com")
    assert answer.status_code == 502 and answer.json()["code"] == "delivery_failed"
    assert not MemberInvitation.platform.exists()


def test_only_admins_invite_and_bad_input_names_the_field(acme):
    tenant, mallory = acme
    admin = jwt_client(mallory)
    for body, field in (
        ({"role": "owner"}, "role"),
        ({"role": "viewer", "email": "not-an-address"}, "email"),
        ({"role": "viewer", "password": "x"}, "password"),
    ):
        answer = admin.post("/api/v1/members", body, format="json")
        assert answer.status_code == 400 and field in answer.json()["errors"], answer.content
    for role in ("viewer", "operator"):
        user = get_user_model().objects.create_user(username=f"a-{role}", password=PASSWORD)
        TenantMembership.objects.create(tenant=tenant, user=user, role=role)
        assert _invite(jwt_client(user)).status_code == 403
    assert not MemberInvitation.platform.exists()


# --- the dashboard's pages -----------------------------------------------------------------------
def test_the_dashboard_issues_a_link_and_a_new_person_joins_with_it(acme):
    tenant, _ = acme
    admin = Client()
    assert admin.login(username="mallory", password=PASSWORD)
    page = admin.post("/dashboard/members", {"role": "operator", "email": ""})
    assert page.status_code == 201
    link = page.context["issued"].link
    assert link in page.content.decode() and "not shown again" in page.content.decode()
    assert link not in admin.get("/dashboard/members").content.decode()  # once
    invitee = Client()
    opened = invitee.get(link.replace("http://testserver", ""))
    assert opened.status_code == 302 and opened["Location"] == "/dashboard/join"
    offer = invitee.get("/dashboard/join")
    assert offer.status_code == 200
    assert "acme" in offer.content.decode() and "operator" in offer.content.decode()
    mismatch = invitee.post(
        "/dashboard/join",
        {"username": "frank", "password": "Frank-types-2026", "password_again": "Frank-types"},
    )
    assert mismatch.status_code == 400
    joined = invitee.post(
        "/dashboard/join",
        {"username": "frank", "password": "Frank-types-2026", "password_again": "Frank-types-2026"},
    )
    assert joined.status_code == 302 and joined["Location"] == "/dashboard/?tenant=acme"
    assert invitee.get("/dashboard/").status_code == 200  # signed in, as frank, in acme
    assert TenantMembership.platform.get(tenant=tenant, user__username="frank").role == "operator"
    # The same link in another browser: used.
    late = Client()
    late.get(link.replace("http://testserver", ""))
    assert late.get("/dashboard/join").status_code == 410
    assert _login_status("frank", "Frank-types-2026") == 200


def test_the_dashboard_accepts_for_the_signed_in_user(acme, demo):
    _, demo_admin = demo
    token = _invite(jwt_client(acme[1])).json()["token"]
    browser = Client()
    assert browser.login(username="demo-admin", password=PASSWORD)
    browser.get(f"/dashboard/join/{token}")
    offer = browser.get("/dashboard/join").content.decode()
    assert "Join as demo-admin" in offer and "password_again" not in offer
    assert browser.post("/dashboard/join").status_code == 302
    assert demo_admin.memberships.filter(tenant__slug="acme", role="viewer").exists()


def test_the_dashboard_join_page_refuses_a_bad_token_and_creates_nothing(acme):
    browser = Client()
    assert browser.get("/dashboard/join").status_code == 404  # no token at all
    browser.get("/dashboard/join/inv_000000000000_guess")
    assert browser.get("/dashboard/join").status_code == 404
    response = browser.post(
        "/dashboard/join",
        {
            "username": "ghost",
            "password": "Ghost-writes-2026",
            "password_again": "Ghost-writes-2026",
        },
    )
    assert response.status_code == 404
    assert not get_user_model().objects.filter(username="ghost").exists()


def test_the_members_page_revokes(acme):
    issued = _invite(jwt_client(acme[1])).json()
    admin = Client()
    assert admin.login(username="mallory", password=PASSWORD)
    assert "invitation-revoke" in admin.get("/dashboard/members").content.decode()
    response = admin.post(f"/dashboard/members/invitations/{issued['id']}/revoke")
    assert response.status_code == 302
    assert _accept(issued["token"], username="g", password="Gone-already-2026").status_code == 410
