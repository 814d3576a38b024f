"""Webhook signatures carry their time: a receiver following the manual's recipe
(docs/tasks/notifications.md) accepts a fresh delivery and refuses the same delivery replayed
later, a changed body, a forged time and a wrong secret. The delivery is a real HTTP POST to
a local receiver."""

from __future__ import annotations

import time

import pytest

from alerting.services.delivery import SIGNATURE_HEADER, Target, deliver
from alerting.services.signing import signature_header, signature_verify

SECRET = "whsec-test-0123456789"


@pytest.fixture
def delivered(receiver):
    sent_at = time.time()
    result = deliver(
        Target("webhook", receiver.url + "/hook"),
        {"event": "failure", "title": "t"},
        signing_secret=SECRET,
        allowed_hosts=["127.0.0.1"],  # the receiver, on loopback
    )
    assert result.ok, result.detail
    [request] = receiver.requests
    return request["body"], request["headers"][SIGNATURE_HEADER], sent_at


def test_a_fresh_delivery_verifies(delivered):
    body, header, sent_at = delivered
    assert header.startswith("t=") and ",v1=" in header
    assert abs(int(header.split(",")[0][2:]) - sent_at) < 60
    assert signature_verify(SECRET, body, header)


def test_the_same_delivery_replayed_later_is_refused(delivered):
    body, header, sent_at = delivered
    assert signature_verify(SECRET, body, header, now=sent_at + 240)
    assert not signature_verify(SECRET, body, header, now=sent_at + 600)


def test_a_changed_body_a_forged_time_or_another_secret_is_refused(delivered):
    body, header, _ = delivered
    assert not signature_verify(SECRET, body + b" ", header)
    digest = header.split(",v1=")[1]
    assert not signature_verify(SECRET, body, f"t={int(time.time()) + 1},v1={digest}")
    assert not signature_verify("another-secret", body, header)
    assert not signature_verify(SECRET, body, "sha256=" + digest)  # the old, timeless form
    assert not signature_verify(SECRET, body, "")


def test_a_rotating_sender_may_send_two_signatures():
    body, now = b'{"event": "x"}', int(time.time())
    old = signature_header("old-secret", body, timestamp=now)
    new = signature_header("new-secret", body, timestamp=now).split(",")[1]
    assert signature_verify("new-secret", body, f"{old},{new}")
    assert signature_verify("old-secret", body, f"{old},{new}")
