"""The dashboard's channels page: an admin adds a channel, sends a test (the receiver's
answer is shown), deletes it; a viewer cannot see the page; secrets are never rendered."""

from __future__ import annotations

import pytest
from django.test import Client

from alerting.models import NotificationChannel
from tests.alerting.services import ServiceReceiver
from tests.api_clients import PASSWORD, member_client

pytestmark = pytest.mark.django_db

ROUTING_KEY = "R0UT1NGK3Y0000000000000000000000"


@pytest.fixture
def pagerduty(settings):
    server = ServiceReceiver()
    settings.ALERTS = {
        **settings.ALERTS,
        "PAGERDUTY_EVENTS_URL": server.url + "/v2/enqueue",
        "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"],
    }
    yield server
    server.stop()


def test_an_admin_adds_tests_and_deletes_a_channel(signed_in, tenant, pagerduty):
    response = signed_in.post(
        "/dashboard/channels",
        {"name": "critical", "kind": "pagerduty", "routing_key": ROUTING_KEY, "alerts": "on"},
        follow=True,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "pagerduty://critical" in html and ROUTING_KEY not in html
    channel = NotificationChannel.platform.get(tenant=tenant, name="critical")

    tested = signed_in.post(f"/dashboard/channels/{channel.id}/test", follow=True)
    assert "Event processed" in tested.content.decode()
    [event] = pagerduty.at("/v2/enqueue")
    assert event["errors"] == [] and event["body"]["routing_key"] == ROUTING_KEY

    signed_in.post(f"/dashboard/channels/{channel.id}/delete")
    assert not NotificationChannel.platform.filter(id=channel.id).exists()


def test_bad_input_is_shown_and_saves_nothing(signed_in, tenant):
    response = signed_in.post("/dashboard/channels", {"name": "p", "kind": "pagerduty"})
    assert response.status_code == 200
    assert "routing_key is required" in response.content.decode()
    assert not NotificationChannel.platform.exists()


def test_a_viewer_cannot_open_or_use_the_page(tenant):
    member_client(tenant, "viewer", username="just-looking")
    client = Client()
    assert client.login(username="just-looking", password=PASSWORD)
    assert client.get("/dashboard/channels").status_code == 403
    response = client.post(
        "/dashboard/channels", {"name": "x", "kind": "email", "addresses": "a@example.com"}
    )
    assert response.status_code == 403
    assert not NotificationChannel.platform.exists()


def test_the_add_form_ties_each_input_to_its_kinds_and_keeps_only_the_chosen_kinds(
    signed_in, tenant
):
    html = signed_in.get("/dashboard/channels").content.decode()
    for name, kinds in [
        ("url", "webhook"),
        ("signing_secret", "webhook"),
        ("webhook_url", "slack"),
        ("bot_token", "slack"),
        ("addresses", "email"),
        ("routing_key", "pagerduty"),
    ]:
        assert f'data-for-kinds="{kinds}" id="channel-field-{name}"' in html
    assert "data-kind-select" in html
    signed_in.post(
        "/dashboard/channels",
        {"name": "ops-mail", "kind": "email", "addresses": "ops@example.com", "routing_key": "x"},
    )
    channel = NotificationChannel.platform.get(tenant=tenant, name="ops-mail")
    assert channel.kind == "email" and channel.credential_ciphertext == ""
