"""The platform's mail server is not a tenant's relay (`alerting.services.mail_budget`),
played through the API, real Redis queues and Django's locmem mail: recipients are capped per
channel and per task (400 naming the field), the operator's domains bound them, and a flood
of notices stops at the tenant's hourly rate, what is not sent dropped with an audit entry
and a metric, never silently; other tenants and the operators' own alerts go on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from alerting.services.delivery import Target
from alerting.services.mail_budget import mail_recipients_admit
from scheduler_app.models import AuditEntry, TaskDefinition
from scheduler_app.monitoring.counters import read_notifications_dropped
from tests.alerting.test_notifications import drain, run_once

pytestmark = pytest.mark.django_db


@pytest.fixture
def mail_limits(settings, notify_settings):
    def set_limits(*, recipients: int = 10, per_hour: int = 100, domains=()) -> None:
        settings.ALERTS = {
            **settings.ALERTS,
            "EMAIL_MAX_RECIPIENTS": recipients,
            "EMAIL_PER_TENANT_PER_HOUR": per_hour,
            "EMAIL_ALLOWED_DOMAINS": list(domains),
        }

    set_limits()
    return set_limits


def _addresses(count: int, domain: str = "outside.example") -> list[str]:
    return [f"person{i}@{domain}" for i in range(count)]


def _task(api, notifications: dict):
    return api.post(
        "/api/v1/tasks",
        {
            "name": "notified",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
            "notifications": notifications,
        },
        format="json",
    )


def _dropped(tenant) -> list[dict]:
    entries = AuditEntry.platform.filter(tenant=tenant, action="notification.dropped")
    return [entry.detail for entry in entries.order_by("id")]


def test_recipients_past_the_cap_are_a_400_naming_the_field(api, tenant, mail_limits):
    mail_limits(recipients=10)
    too_many = {"name": "all", "kind": "email", "addresses": _addresses(11)}
    answer = api.post("/api/v1/channels", too_many, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "addresses"
    assert "at most 10 addresses; 11 were given" in answer.json()["message"]
    ten = {"name": "all", "kind": "email", "addresses": _addresses(10)}
    assert api.post("/api/v1/channels", ten, format="json").status_code == 201
    # A task's email:// targets together have the same cap, the 11th named.
    targets = [f"email://{a}" for a in _addresses(11)]
    answer = _task(api, {"on_failure": targets[:6], "on_dlq": targets[6:]})
    assert answer.status_code == 400
    assert answer.json()["field"] == "notifications.on_dlq[4]"
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()
    # The same address twice is one recipient.
    assert _task(api, {"on_failure": targets[:10], "on_dlq": targets[:10]}).status_code == 201


def test_the_operators_domains_bound_what_is_saved_and_what_is_sent(
    api, tenant, mail_limits, notify_settings, django_capture_on_commit_callbacks
):
    mixed = {"name": "ops", "kind": "email", "addresses": ["a@company.com", "b@outside.example"]}
    ops = api.post("/api/v1/channels", mixed, format="json")  # saved before the rule
    assert ops.status_code == 201
    mail_limits(domains=["company.com"])
    answer = api.post("/api/v1/channels", {**mixed, "name": "again"}, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "addresses[1]"
    answer = _task(api, {"on_failure": ["email://x@outside.example"]})
    assert answer.status_code == 400 and answer.json()["field"] == "notifications.on_failure[0]"
    answer = _task(api, {"on_success": ["ops", "email://c@eu.company.com"]})
    assert answer.status_code == 201, answer.content
    task = TaskDefinition.platform.get(id=answer.json()["id"])
    run_once(task, "success", django_capture_on_commit_callbacks)
    drain(notify_settings)
    assert sorted(address for message in mail.outbox for address in message.to) == [
        "a@company.com",
        "c@eu.company.com",
    ]
    [dropped] = _dropped(tenant)
    assert dropped["reason"] == "domain_not_allowed" and dropped["recipients"] == 1


def test_a_flood_of_notices_stops_at_the_hourly_rate_and_says_so(
    api, tenant, tenant_factory, mail_limits, notify_settings, django_capture_on_commit_callbacks
):
    mail_limits(per_hour=5)
    channel = {"name": "pair", "kind": "email", "addresses": _addresses(2)}
    assert api.post("/api/v1/channels", channel, format="json").status_code == 201
    task = TaskDefinition.platform.get(id=_task(api, {"on_success": ["pair"]}).json()["id"])
    for _ in range(4):  # 4 notices of 2 messages each: 8 against a rate of 5
        run_once(task, "success", django_capture_on_commit_callbacks)
    drain(notify_settings)
    assert len(mail.outbox) == 2  # 4 messages sent, the third notice would make 6
    dropped = _dropped(tenant)
    assert [(d["reason"], d["recipients"]) for d in dropped] == [("mail_rate", 2)] * 2
    assert all(d["title"] == "Task notified succeeded" for d in dropped)
    assert 0 < dropped[0]["retry_after_seconds"] <= 3600
    assert read_notifications_dropped()[(str(tenant.id), "email", "mail_rate")] == 4
    budget = api.get("/api/v1/tenant/usage").json()["budgets"]["mail_messages"]
    assert (budget["used"], budget["limit"]) == (4, 5)
    # The tenant reads why in its audit log.
    audit = api.get("/api/v1/audit", {"action": "notification.dropped"}).json()["results"]
    assert len(audit) == 2 and audit[0]["detail"]["reason"] == "mail_rate"
    # A channel test over the rate: 429 with Retry-After.
    pair = api.get("/api/v1/channels").json()["results"][0]
    tested = api.post(f"/api/v1/channels/{pair['id']}/test", {}, format="json")
    assert tested.status_code == 429 and tested.json()["code"] == "mail_rate_exceeded"
    assert 1 <= int(tested["Retry-After"]) <= 3600
    # Another tenant's budget is its own; the operators' alerts are not counted at all.
    other, _ = tenant_factory("globex")
    theirs = Target("email", "x@globex.example", tenant_id=str(other.id))
    assert mail_recipients_admit(target=theirs, message={"title": "t"}) == ["x@globex.example"]
    operators = Target("email", ", ".join(_addresses(50, "ops.example")), platform=True)
    assert len(mail_recipients_admit(target=operators, message={"title": "t"})) == 50


def test_the_rate_rolls_with_the_hour(tenant, mail_limits):
    mail_limits(per_hour=3)
    target = Target("email", ", ".join(_addresses(2)), tenant_id=str(tenant.id))
    start = timezone.now()
    assert len(mail_recipients_admit(target=target, message={"title": "a"}, now=start)) == 2
    later = start + timedelta(minutes=30)
    assert mail_recipients_admit(target=target, message={"title": "b"}, now=later) == []
    an_hour_on = start + timedelta(minutes=61)
    assert len(mail_recipients_admit(target=target, message={"title": "c"}, now=an_hour_on)) == 2
    assert [d["title"] for d in _dropped(tenant)] == ["b"]
