"""Notification targets as the design document writes them (`slack://`, `email://`,
`pagerduty://`, `webhook://`), delivered to local stand-ins for Slack and PagerDuty that
check the payloads against the services' published formats (tests/alerting/services.py).
The runs finish through the services; the notification messages go through a real Redis
queue, drained as a worker would (tests/alerting/test_notifications.py)."""

from __future__ import annotations

import pytest
from django.core import mail

from alerting.models import NotificationChannel
from alerting.services.signing import signature_verify
from scheduler_app.models import TaskDefinition
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.alerting.services import ServiceReceiver
from tests.alerting.smtp_receiver import SmtpReceiver
from tests.alerting.test_notifications import drain, run_once
from tests.examples.document import task_request

pytestmark = pytest.mark.django_db

BOT_TOKEN = "xoxb-test-token"
ROUTING_KEY = "R0UT1NGK3Y0000000000000000000000"


@pytest.fixture
def services(settings, notify_settings):
    server = ServiceReceiver(bot_token=BOT_TOKEN)
    settings.ALERTS = {
        **settings.ALERTS,
        "SLACK_API_URL": server.url + "/api",
        "PAGERDUTY_EVENTS_URL": server.url + "/v2/enqueue",
    }
    yield server
    server.stop()


def _channel(api, **body) -> dict:
    response = api.post("/api/v1/channels", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_the_documents_targets_are_told_of_failure_dead_letter_and_recovery(
    api, tenant, services, notify_settings, django_capture_on_commit_callbacks
):
    _channel(api, name="slack", kind="slack", bot_token=BOT_TOKEN)
    _channel(api, name="critical", kind="pagerduty", routing_key=ROUTING_KEY)
    created = api.post("/api/v1/tasks", task_request(), format="json")
    assert created.status_code == 201, created.content
    task = TaskDefinition.platform.get(id=created.json()["id"])
    capture = django_capture_on_commit_callbacks

    # A permanent failure: announced on on_failure, and dead-lettered: paged on on_dlq.
    _, report = run_once(task, "failed", capture, transient=False, error_class="exit_1")
    assert report.dead_lettered
    drain(notify_settings)
    [slack] = services.at("/api/chat.postMessage")
    assert slack["errors"] == [] and slack["body"]["channel"] == "data-engineering"
    assert "daily-etl-pipeline failed" in slack["body"]["text"]
    assert [m.to for m in mail.outbox] == [["oncall@company.com"]]
    [trigger] = services.at("/v2/enqueue")
    assert trigger["errors"] == []
    event = trigger["body"]
    assert event["event_action"] == "trigger" and event["routing_key"] == ROUTING_KEY
    assert event["dedup_key"] == f"scheduler:task:{task.id}"
    assert event["payload"]["severity"] == "critical"
    assert "dead-lettered" in event["payload"]["summary"]

    # The next success resolves the PagerDuty incident (same dedup key) and tells Slack
    # and the mailbox that the task recovered.
    run_once(task, "success", capture)
    drain(notify_settings)
    resolve = services.at("/v2/enqueue")[-1]
    assert resolve["errors"] == []
    assert resolve["body"]["event_action"] == "resolve"
    assert resolve["body"]["dedup_key"] == event["dedup_key"]
    assert "recovered" in services.at("/api/chat.postMessage")[-1]["body"]["text"]
    assert "recovered" in mail.outbox[-1].subject


def test_a_slack_channel_of_its_own_posts_through_its_incoming_webhook(
    api, tenant, services, notify_settings, django_capture_on_commit_callbacks
):
    _channel(
        api, name="data-engineering", kind="slack", webhook_url=services.url + "/services/T/B/X"
    )
    task = _task(api, {"on_failure": ["slack://data-engineering"]})
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=True)
    drain(notify_settings)
    [posted] = services.at("/services/T/B/X")
    assert posted["errors"] == [] and "failed" in posted["body"]["text"]
    assert services.at("/api/chat.postMessage") == []


def test_a_webhook_target_is_signed(
    api, tenant, receiver, notify_settings, django_capture_on_commit_callbacks
):
    _channel(api, name="ops", kind="webhook", url=receiver.url + "/hook", signing_secret="k")
    task = _task(api, {"on_failure": ["webhook://ops"]})
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=True)
    drain(notify_settings)
    [request] = [r for r in receiver.requests if r["path"] == "/hook"]
    header = request["headers"]["X-Scheduler-Signature"]
    assert header.startswith("t=") and ",v1=" in header
    assert signature_verify("k", request["body"], header)
    assert not signature_verify("other-secret", request["body"], header)


def _task(api, notifications: dict) -> TaskDefinition:
    body = {
        "name": "notified",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
        "retry_policy": {"max_attempts": 3},
        "notifications": notifications,
    }
    response = api.post("/api/v1/tasks", body, format="json")
    assert response.status_code == 201, response.content
    return TaskDefinition.platform.get(id=response.json()["id"])


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("slack://data-engineering", "no Slack connection"),
        ("pagerduty://critical", "no pagerduty channel named 'critical'"),
        ("webhook://ops", "no webhook channel named 'ops'"),
        ("email://not-an-address", "not an email address"),
        ("sms://+15550100", "unknown scheme 'sms'"),
        ("ops-room", "no channel of that name"),
    ],
)
def test_an_unknown_or_unconfigured_target_is_a_400_naming_it(api, target, says):
    body = {
        "name": "n",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
        "notifications": {"on_success": [], "on_failure": ["email://ok@example.com", target]},
    }
    response = api.post("/api/v1/tasks", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "notifications.on_failure[1]"
    assert target in response.json()["message"] and says in response.json()["message"]
    assert not TaskDefinition.platform.exists()


def test_the_test_endpoint_reports_what_the_receiver_answered(api, tenant, services):
    pager = _channel(api, name="critical", kind="pagerduty", routing_key=ROUTING_KEY)
    answer = api.post(f"/api/v1/channels/{pager['id']}/test", {}, format="json").json()
    assert answer["ok"] is True and "Event processed" in answer["detail"]

    wrong = _channel(api, name="wrong-key", kind="pagerduty", routing_key="too-short")
    answer = api.post(f"/api/v1/channels/{wrong['id']}/test", {}, format="json").json()
    assert answer["ok"] is False and "routing_key" in answer["detail"]

    bot = _channel(api, name="slack", kind="slack", bot_token="xoxb-revoked")
    answer = api.post(
        f"/api/v1/channels/{bot['id']}/test", {"slack_channel": "general"}, format="json"
    ).json()
    assert answer["ok"] is False and "invalid_auth" in answer["detail"]


def test_channel_secrets_are_write_only(api, tenant, services):
    created = _channel(api, name="slack", kind="slack", bot_token=BOT_TOKEN)
    shown = api.get(f"/api/v1/channels/{created['id']}").content.decode()
    listed = api.get("/api/v1/channels").content.decode()
    assert BOT_TOKEN not in shown and BOT_TOKEN not in listed
    stored = NotificationChannel.platform.get(id=created["id"])
    assert BOT_TOKEN not in stored.credential_ciphertext and stored.target == ""
    assert created["has_credential"] is True and created["uri"] == "slack://<slack-channel>"


def test_a_kind_refuses_another_kinds_fields(api):
    response = api.post(
        "/api/v1/channels",
        {"name": "p", "kind": "pagerduty", "routing_key": ROUTING_KEY, "url": "https://x.io"},
        format="json",
    )
    assert response.status_code == 400 and response.json()["field"] == "url"
    assert not NotificationChannel.platform.exists()


def test_deliveries_go_through_the_ssrf_guard(
    api, tenant, services, settings, notify_settings, django_capture_on_commit_callbacks
):
    # The attacker's target: a loopback address. Refused when the channel is saved ...
    settings.ALERTS = {**settings.ALERTS, "WEBHOOK_ALLOWED_HOSTS": []}
    tenant_webhook_hosts_set(tenant=tenant, hosts=[], actor="operator:test")
    response = api.post(
        "/api/v1/channels",
        {"name": "inside", "kind": "webhook", "url": services.url + "/internal"},
        format="json",
    )
    assert response.status_code == 400 and response.json()["field"] == "url"
    # ... and at delivery, whatever the stored URL says (here PagerDuty's events URL points
    # at loopback, which the guard refuses without the allowlist).
    _channel(api, name="critical", kind="pagerduty", routing_key=ROUTING_KEY)
    task = _task(api, {"on_dlq": ["pagerduty://critical"]})
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=False)
    drain(notify_settings)
    assert services.requests == []
    # The same dead letter with loopback allowed (as these tests allow their receivers):
    # the guard was what stopped it.
    settings.ALERTS = {**settings.ALERTS, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=False)
    drain(notify_settings)
    assert [r["body"]["event_action"] for r in services.at("/v2/enqueue")] == ["trigger"]


def test_an_email_target_is_sent_to_a_mail_server(
    api, tenant, settings, notify_settings, django_capture_on_commit_callbacks
):
    server = SmtpReceiver()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    try:
        task = _task(api, {"on_failure": ["email://oncall@company.com"]})
        run_once(task, "failed", django_capture_on_commit_callbacks, transient=True)
        drain(notify_settings)
        [mailed] = server.messages
        assert mailed["to"] == ["oncall@company.com"]
        assert mailed["from"] == settings.ALERTS["FROM_EMAIL"]
        assert "notified failed" in str(mailed["message"]["Subject"])
        assert "/dashboard/executions/" in mailed["message"].get_payload()
    finally:
        server.stop()


def test_a_test_send_goes_through_the_ssrf_guard_too(api, tenant, services, settings):
    pager = _channel(api, name="critical", kind="pagerduty", routing_key=ROUTING_KEY)
    settings.ALERTS = {**settings.ALERTS, "WEBHOOK_ALLOWED_HOSTS": []}
    answer = api.post(f"/api/v1/channels/{pager['id']}/test", {}, format="json").json()
    assert answer["ok"] is False and answer["detail"].startswith("ssrf_blocked")
    assert services.requests == []
