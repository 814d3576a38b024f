"""Notifications end to end: a run finishes through the services, the after-commit hook
enqueues a Celery message in real Redis, the test drains that queue and runs the tasks it
finds (as a worker would), and a local HTTP receiver / Django's locmem mail see the result."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from alerting.models import AlertIncident, NotificationChannel
from alerting.rules import alerts_evaluate
from alerting.services.channels import notification_channel_create
from alerting.services.delivery import SIGNATURE_HEADER, Target, deliver
from alerting.services.signing import signature_verify
from alerting.tasks import enqueue_incident_changes
from project.celery import app
from runs.finish import run_finish
from scheduler_app.choices import ExecutionStatus
from scheduler_app.fleet import registry
from scheduler_app.models import ExecutionLoss, TaskDefinition, TaskExecution
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db

SECRET = "hook-secret"


def drain(queue: str) -> int:
    """Run every Celery message waiting in `queue`, repeatedly, as a worker would."""
    ran = 0
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            while True:
                try:
                    message = simple.get(timeout=0.5)
                except simple.Empty:
                    return ran
                args, kwargs, _embed = message.payload
                app.tasks[message.headers["task"]](*args, **kwargs)
                message.ack()
                ran += 1
        finally:
            simple.close()


@pytest.fixture
def channels(tenant, receiver):
    return {
        "hook": notification_channel_create(
            tenant=tenant,
            name="hook",
            kind="webhook",
            target=receiver.url + "/hook",
            signing_secret=SECRET,
        ),
        "slack": NotificationChannel.objects.create(
            tenant=tenant, name="slack", kind="slack", target=receiver.url + "/slack"
        ),
        "mail": NotificationChannel.objects.create(
            tenant=tenant,
            name="mail",
            kind="email",
            target="ops@example.com, dev@example.com",
            alerts=False,
        ),
    }


def run_once(task, status: str, capture, *, transient: bool = False, error_class: str = "boom"):
    with capture(execute=True):
        execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w1", lease_seconds=30)
    with capture(execute=True):
        report = run_finish(
            execution_id=execution.id,
            claim_token=claim.claim_token,
            outcome=Outcome(status=status, transient=transient, error_class=error_class),
        )
    return execution, report


def test_failure_is_announced_once_and_its_recovery_once(
    tenant, channels, receiver, notify_settings, django_capture_on_commit_callbacks
):
    task = make_task(
        tenant,
        name="flaky",
        max_attempts=5,
        notifications={"on_failure": ["hook", "slack", "mail"], "on_success": ["hook"]},
    )
    capture = django_capture_on_commit_callbacks
    run_once(task, "failed", capture, transient=True, error_class="http_5xx")
    drain(notify_settings)
    [failure] = receiver.bodies("/hook")
    assert failure["event"] == "failure" and failure["task"] == "flaky"
    [signed] = [r for r in receiver.requests if r["path"] == "/hook"]
    assert signature_verify(SECRET, signed["body"], signed["headers"][SIGNATURE_HEADER])
    assert "failed" in receiver.bodies("/slack")[0]["text"]
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ops@example.com", "dev@example.com"]

    # The same incident: a second failure tells nobody.
    run_once(task, "failed", capture, transient=True)
    drain(notify_settings)
    assert len(receiver.requests) == 2 and len(mail.outbox) == 1

    # Recovery: one resolve message to the failure channels, one success to on_success.
    run_once(task, "success", capture)
    drain(notify_settings)
    events = [b["event"] for b in receiver.bodies("/hook")]
    assert events == ["failure", "resolved", "success"] or events == [
        "failure",
        "success",
        "resolved",
    ]
    assert [b["text"] for b in receiver.bodies("/slack")][1].startswith("*Task flaky recovered*")
    assert len(mail.outbox) == 2 and "recovered" in mail.outbox[1].subject
    assert AlertIncident.platform.get(rule="task_failing").resolved_at is not None


def test_dead_letter_notice(
    tenant, channels, receiver, notify_settings, django_capture_on_commit_callbacks
):
    task = make_task(tenant, name="doomed", notifications={"on_dlq": ["hook"]})
    _, report = run_once(task, "failed", django_capture_on_commit_callbacks, transient=False)
    assert report.dead_lettered
    drain(notify_settings)
    assert [b["event"] for b in receiver.bodies("/hook")] == ["dead_letter"]


def test_webhook_to_a_private_address_is_refused_without_the_allowlist(settings, receiver):
    settings.ALERTS = {**settings.ALERTS, "WEBHOOK_ALLOWED_HOSTS": []}
    result = deliver(Target("webhook", receiver.url + "/hook"), {"event": "x", "title": "t"})
    assert not result.ok and result.detail.startswith("ssrf_blocked")
    assert receiver.requests == []


def _terminal_runs(task, *, failed: int, succeeded: int):
    now = timezone.now()
    for i in range(failed + succeeded):
        TaskExecution.objects.create(
            tenant_id=task.tenant_id,
            task=task,
            status=ExecutionStatus.FAILED if i < failed else ExecutionStatus.SUCCESS,
            scheduled_at=now - timedelta(minutes=30, seconds=i),
            started_at=now,
            completed_at=now,
        )


def _tenants_own(changes, tenant):
    """The incident changes keyed to `tenant`: platform-wide rules (a dead worker another
    test's fleet left behind) evaluate in the same pass and are not this test's business."""
    return [(incident, gone) for incident, gone in changes if incident.key == str(tenant.id)]


def test_error_rate_rule_opens_once_notifies_the_tenant_and_resolves(
    tenant, channels, receiver, notify_settings
):
    task = make_task(tenant, name="rated")
    _terminal_runs(task, failed=3, succeeded=20)  # 13 % > 5 %, and 87 % success < 95 %
    changes = _tenants_own(alerts_evaluate(), tenant)
    assert sorted((i.rule, r) for i, r in changes) == [
        ("error_rate_high", False),
        ("success_rate_low", False),
    ]
    # Still firing: no new incident, nobody told twice.
    assert _tenants_own(alerts_evaluate(), tenant) == []
    enqueue_incident_changes(changes)
    drain(notify_settings)
    # Alert channels only: the webhook and Slack (alerts=True), not the mail channel.
    assert sorted(b["rule"] for b in receiver.bodies("/hook")) == [
        "error_rate_high",
        "success_rate_low",
    ]
    assert len(receiver.bodies("/slack")) == 2 and mail.outbox == []

    TaskExecution.platform.filter(task=task, status=ExecutionStatus.FAILED).update(
        status=ExecutionStatus.SUCCESS
    )
    changes = _tenants_own(alerts_evaluate(), tenant)
    assert sorted((i.rule, r) for i, r in changes) == [
        ("error_rate_high", True),
        ("success_rate_low", True),
    ]
    enqueue_incident_changes(changes)
    drain(notify_settings)
    events = [b["event"] for b in receiver.bodies("/hook")]
    assert events == ["alert", "alert", "alert_resolved", "alert_resolved"]


def test_success_rate_rule_fires_on_cancelled_runs_without_errors(tenant):
    task = make_task(tenant, name="often-cancelled")
    _terminal_runs(task, failed=0, succeeded=20)
    TaskExecution.platform.filter(
        id__in=TaskExecution.platform.filter(task=task).values("id")[:2]
    ).update(status=ExecutionStatus.CANCELLED)  # 90 % success, 0 % errors
    rules = {(i.rule, i.key) for i, _ in alerts_evaluate()}
    assert rules >= {("success_rate_low", str(tenant.id))}
    assert ("error_rate_high", str(tenant.id)) not in rules


def test_missed_schedule_and_dead_worker_rules(tenant):
    task = make_task(tenant, name="stuck", schedule={"type": "cron", "expression": "* * * * *"})
    type(task).platform.filter(id=task.id).update(
        next_fire_at=timezone.now() - timedelta(minutes=5)
    )
    now = timezone.now()
    # A run lost with its worker (re-queued: the worker's loss, not the run's failure).
    ExecutionLoss.objects.create(
        tenant=tenant,
        execution_id=uuid.uuid4(),
        attempt=1,
        worker_id="celery@gone",
        outcome="requeued",
        lost_at=now,
    )
    silent = registry.WorkerRecord(
        hostname=f"celery@silent-{uuid.uuid4().hex[:6]}",
        queues=["normal"],
        concurrency=1,
        version="test",
        pid=1,
        started_at=time.time() - 600,
        heartbeat_seconds=2.0,
        last_heartbeat=time.time() - 300,  # heartbeats stopped; not yet reaped
    )
    registry.worker_record_save(silent)
    try:
        rules = {(i.rule, i.key) for i, _ in alerts_evaluate()}
    finally:
        get_redis().delete(redis_key(f"fleet:worker:{silent.hostname}"))
    assert ("missed_schedule", str(task.id)) in rules
    assert ("dead_worker", "celery@gone") in rules
    assert ("dead_worker", silent.hostname) in rules


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_hook_evaluates_off_the_tick_and_throttles(tenant, settings):
    from alerting import beat_hook as hook

    settings.ALERTS = {**settings.ALERTS, "EVALUATE_SECONDS": 3600}
    task = make_task(tenant, name="late", schedule={"type": "cron", "expression": "* * * * *"})
    type(task).platform.filter(id=task.id).update(
        next_fire_at=timezone.now() - timedelta(minutes=5)
    )
    hook._last_start = None
    assert hook.alerts_evaluate_if_due() is None  # the first call only starts the clock
    hook._last_start -= 3601
    thread = hook.alerts_evaluate_if_due()
    assert thread is not None
    thread.join(timeout=30)
    assert AlertIncident.platform.filter(rule="missed_schedule", key=str(task.id)).exists()
    assert hook.alerts_evaluate_if_due() is None  # not due again for an hour


@pytest.mark.parametrize(
    ("notifications", "field"),
    [
        ({"on_fail": ["hook"]}, "notifications.on_fail"),
        ({"on_failure": [3]}, "notifications.on_failure"),
        ({"on_dlq": {"a": 1}}, "notifications.on_dlq"),
    ],
)
def test_bad_notifications_are_refused_naming_the_field(api, notifications, field):
    from tests.factories import task_spec

    response = api.post(
        "/api/v1/tasks", task_spec(name="n", notifications=notifications), format="json"
    )
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not TaskDefinition.platform.filter(name="n").exists()
