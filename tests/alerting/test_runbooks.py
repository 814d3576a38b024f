"""Every alert names a runbook section that exists, and its URL travels with the alert: in
the webhook payload, PagerDuty's links, a Slack button and the email. Delivered through the
real path (incidents evaluated, messages queued in Redis and drained as a worker would) to
local stand-ins that check the services' formats (tests/alerting/services.py)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.core import mail
from django.utils import timezone
from markdown.extensions.toc import slugify

from alerting import checks
from alerting.rules import RULES, alerts_evaluate
from alerting.runbooks import RUNBOOK_ANCHORS, RUNBOOKS_PAGE, runbook_url
from alerting.services.channels import notification_channel_create
from alerting.services.delivery import pagerduty_event
from alerting.tasks import enqueue_incident_changes
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution
from tests.alerting.services import ServiceReceiver
from tests.alerting.test_notifications import drain
from tests.factories import make_task

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations" / "runbooks.md"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
MANUAL = "https://scheduler.example.com/manual"
ROUTING_KEY = "R0UT1NGK3Y0000000000000000000000"
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
EXPLICIT_ID = re.compile(r"\{\s*#([\w-]+)\s*\}$")


def _page_anchors() -> set[str]:
    """The ids mkdocs gives the page's headings (toc's slugify, or an explicit `{ #id }`)."""
    anchors = set()
    for heading in HEADING.findall(PAGE.read_text()):
        explicit = EXPLICIT_ID.search(heading)
        anchors.add(explicit.group(1) if explicit else slugify(heading, "-"))
    return anchors


def _prometheus_rules() -> dict[str, dict]:
    document = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule for group in document["groups"] for rule in group["rules"]}


def test_every_prometheus_rule_names_a_runbook_section_that_exists():
    anchors = _page_anchors()
    for name, rule in _prometheus_rules().items():
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == "{{ $externalLabels.manual_base_url }}/" + RUNBOOKS_PAGE, name
        assert anchor == name.lower() and anchor in anchors, name


def test_every_in_app_rule_names_a_runbook_section_that_exists():
    anchors = _page_anchors()
    # Every rule the evaluator runs, and the incident a task's own failures open.
    assert set(RULES) | {"task_failing"} == set(RUNBOOK_ANCHORS)
    missing = {rule: a for rule, a in RUNBOOK_ANCHORS.items() if a not in anchors}
    assert missing == {}
    # The section other pages link to by name keeps its title and anchor.
    assert "## Task failing repeatedly { #task-failing-repeatedly }" in PAGE.read_text()


def test_the_queue_depth_alert_is_critical_in_app_too():
    assert RULES["queue_depth_high"][0] == "critical"
    assert _prometheus_rules()["SchedulerQueueDepthHigh"]["labels"]["severity"] == "critical"


def test_the_runbook_url_is_the_served_manual_or_the_local_build(settings):
    settings.MANUAL_BASE_URL = MANUAL + "/"
    assert runbook_url("dead_worker") == (f"{MANUAL}/operations/runbooks.html#schedulerdeadworker")
    settings.MANUAL_BASE_URL = ""
    local = (settings.BASE_DIR / "build" / "manual").as_uri()
    assert runbook_url("task_failing") == (
        f"{local}/operations/runbooks.html#task-failing-repeatedly"
    )


def test_production_without_a_manual_url_warns(settings):
    settings.SCHEDULER_PRODUCTION, settings.MANUAL_BASE_URL = True, ""
    assert [w.id for w in checks.check_manual_base_url()] == ["scheduler.W140"]
    settings.MANUAL_BASE_URL = "manual.example.com"
    assert [w.id for w in checks.check_manual_base_url()] == ["scheduler.W141"]
    settings.MANUAL_BASE_URL = MANUAL
    assert checks.check_manual_base_url() == []
    settings.SCHEDULER_PRODUCTION, settings.MANUAL_BASE_URL = False, ""
    assert checks.check_manual_base_url() == []  # `make run` and the tests: the local build


def test_an_unknown_autoscaling_mode_is_an_error(settings):
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "hpa"}
    assert [e.id for e in checks.check_autoscaling_mode()] == ["scheduler.E142"]
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "keda"}
    assert checks.check_autoscaling_mode() == []


def test_a_pagerduty_event_links_the_dashboard_and_the_runbook():
    event = pagerduty_event(
        {
            "event": "alert",
            "title": "ALERT dead_worker: w1",
            "rule": "dead_worker",
            "key": "w1",
            "url": "https://scheduler.example.com/dashboard/workers",
            "runbook_url": f"{MANUAL}/operations/runbooks.html#schedulerdeadworker",
        },
        ROUTING_KEY,
    )
    assert event["links"] == [
        {
            "href": "https://scheduler.example.com/dashboard/workers",
            "text": "Open in the scheduler",
        },
        {"href": f"{MANUAL}/operations/runbooks.html#schedulerdeadworker", "text": "Runbook"},
    ]


@pytest.fixture
def services(settings, notify_settings):
    server = ServiceReceiver()
    settings.ALERTS = {**settings.ALERTS, "PAGERDUTY_EVENTS_URL": server.url + "/v2/enqueue"}
    yield server
    server.stop()


def _failing_tenant(tenant) -> None:
    task = make_task(tenant, name="failing-often")
    now = timezone.now()
    for i in range(25):
        TaskExecution.objects.create(
            tenant=tenant,
            task=task,
            status=ExecutionStatus.FAILED if i < 5 else ExecutionStatus.SUCCESS,
            scheduled_at=now - timedelta(minutes=30, seconds=i),
            started_at=now,
            completed_at=now,
        )


def _alert_channels(api, services) -> None:
    for body in (
        {"name": "slack", "kind": "slack", "webhook_url": services.url + "/services/T/B/X"},
        {"name": "pager", "kind": "pagerduty", "routing_key": ROUTING_KEY},
        {"name": "mail", "kind": "email", "addresses": ["oncall@company.com"]},
    ):
        response = api.post("/api/v1/channels", body, format="json")
        assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_an_alert_carries_its_runbook_to_every_kind_of_channel(
    api, tenant, settings, services, receiver, notify_settings
):
    settings.MANUAL_BASE_URL = MANUAL
    _alert_channels(api, services)
    notification_channel_create(
        tenant=tenant, name="hook", kind="webhook", target=receiver.url + "/hook"
    )
    _failing_tenant(tenant)
    changes = [(i, r) for i, r in alerts_evaluate() if i.key == str(tenant.id)]
    assert {i.rule for i, _ in changes} == {"error_rate_high", "success_rate_low"}
    enqueue_incident_changes(changes)
    drain(notify_settings)
    runbooks = {
        "error_rate_high": f"{MANUAL}/operations/runbooks.html#schedulererrorratehigh",
        "success_rate_low": f"{MANUAL}/operations/runbooks.html#schedulersuccessratelow",
    }

    # The webhook payload.
    assert {b["rule"]: b["runbook_url"] for b in receiver.bodies("/hook")} == runbooks
    # Slack: a Runbook button, in a block Slack accepts.
    posts = services.at("/services/T/B/X")
    assert len(posts) == 2 and all(p["errors"] == [] for p in posts)
    buttons = [
        element
        for post in posts
        for block in post["body"]["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    ]
    assert sorted(b["url"] for b in buttons) == sorted(runbooks.values())
    assert {b["text"]["text"] for b in buttons} == {"Runbook"}
    # PagerDuty: in the event's links.
    events = services.at("/v2/enqueue")
    incident_of = {incident.rule: incident.id for incident, _ in changes}
    assert len(events) == 2 and all(e["errors"] == [] for e in events)
    for event in events:
        rule = event["body"]["payload"]["custom_details"]["rule"]
        assert event["body"]["links"] == [
            {
                # The tenant's incident opens on its own row of the Incidents page.
                "href": f"{settings.ALERTS['BASE_URL']}/dashboard/incidents#incident-"
                f"{incident_of[rule]}",
                "text": "Open in the scheduler",
            },
            {"href": runbooks[rule], "text": "Runbook"},
        ]
    # The email.
    assert len(mail.outbox) == 2
    assert {m.body.splitlines()[-1] for m in mail.outbox} == {
        f"Runbook: {url}" for url in runbooks.values()
    }


@pytest.mark.django_db
def test_a_local_runbook_link_is_text_in_slack_not_a_button_slack_would_refuse(
    api, tenant, settings, services, notify_settings
):
    settings.MANUAL_BASE_URL = ""  # the local build: a file:// URL
    _alert_channels(api, services)
    _failing_tenant(tenant)
    enqueue_incident_changes([(i, r) for i, r in alerts_evaluate() if i.key == str(tenant.id)])
    drain(notify_settings)
    posts = services.at("/services/T/B/X")
    assert len(posts) == 2 and all(p["errors"] == [] for p in posts)
    for post in posts:
        assert [b for b in post["body"]["blocks"] if b["type"] == "actions"] == []
        assert "Runbook: file://" in post["body"]["blocks"][-1]["elements"][0]["text"]


@pytest.mark.django_db
def test_a_failing_tasks_notice_links_the_task_failing_runbook(
    tenant, settings, receiver, notify_settings, django_capture_on_commit_callbacks
):
    from tests.alerting.test_notifications import run_once

    settings.MANUAL_BASE_URL = MANUAL
    notification_channel_create(
        tenant=tenant, name="hook", kind="webhook", target=receiver.url + "/hook"
    )
    task = make_task(tenant, name="nightly", notifications={"on_failure": ["hook"]})
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=True)
    drain(notify_settings)
    [notice] = receiver.bodies("/hook")
    assert notice["event"] == "failure"
    assert notice["runbook_url"] == f"{MANUAL}/operations/runbooks.html#task-failing-repeatedly"
