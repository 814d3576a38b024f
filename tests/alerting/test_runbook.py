"""The runbook "Task failing repeatedly", end to end through the services: runs end through
the worker's finish path (real PostgreSQL), the crossing of pause_after_failures enqueues the
runbook in real Redis, the test drains that queue as a worker would, a local HTTP server
plays the downstream service's health endpoint (allow-listed for the tenant: it is on
loopback), and a local webhook receiver and Django's mail outbox are what the people told
see."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from alerting.models import NotificationChannel
from alerting.services.channels import notification_channel_create
from alerting.services.runbook import task_runbook_run
from alerting.services.runbook_turns import runbook_turn_key
from runs.finish import run_finish
from scheduler_app.choices import Trigger
from scheduler_app.models import AuditEntry, TaskDefinition, TaskExecution
from scheduler_app.redis_client import get_redis
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_pause, task_trigger
from tests.alerting.test_notifications import drain
from tests.api_clients import jwt_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db

# 127.0.0.1 as one integer: no address literal the save-time check recognises, resolved to
# loopback only when the check is made (then refused without the tenant's allow-list).
DISGUISED_LOOPBACK = "2130706433"


class HealthEndpoint:
    """GET answers `status`; every request is recorded."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.paths: list[str] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                endpoint.paths.append(self.path)
                self.send_response(endpoint.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/health"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def health():
    endpoint = HealthEndpoint()
    yield endpoint
    endpoint.server.shutdown()


@pytest.fixture
def hooks(tenant, receiver):
    return {
        "owner-hook": notification_channel_create(
            tenant=tenant, name="owner-hook", kind="webhook", target=receiver.url + "/owner"
        ),
        "team-hook": notification_channel_create(
            tenant=tenant, name="team-hook", kind="webhook", target=receiver.url + "/team"
        ),
    }


def failing_task(tenant, *, health_check=None, owner="owner-hook", **extra) -> TaskDefinition:
    policy: dict = {"pause_after_failures": 2}
    if health_check is not None:
        policy["health_check"] = health_check
    return make_task(
        tenant,
        name=extra.pop("name", "flaky-sync"),
        retry_policy={"max_attempts": 1},
        policy=policy,
        owner=owner,
        notifications={"on_failure": ["team-hook"]},
        **extra,
    )


def end_run(execution: TaskExecution, status: str, capture) -> None:
    claim = execution_claim(execution_id=execution.id, worker_id="w1", lease_seconds=30)
    with capture(execute=True):
        report = run_finish(
            claim=claim, outcome=Outcome(status=status, transient=False, error_class="boom")
        )
    assert report.accepted


def fail_times(task: TaskDefinition, times: int, capture) -> None:
    for _ in range(times):
        end_run(task_trigger(task=task), "failed", capture)


def runbook_notices(receiver, path: str) -> list[dict]:
    """What the receiver got from the runbook (the on_failure targets also get the task's
    ordinary failure notice)."""
    return [b for b in receiver.bodies(path) if b["event"] == "runbook_paused"]


def runbook_retries(task: TaskDefinition) -> list[TaskExecution]:
    return list(TaskExecution.platform.filter(task=task, trigger=Trigger.RUNBOOK))


def test_healthy_service_gets_exactly_one_retry_with_the_runbook_trigger(
    tenant, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    task = failing_task(tenant, health_check={"url": health.url})
    fail_times(task, 2, django_capture_on_commit_callbacks)
    drain(notify_settings)
    [retry] = runbook_retries(task)
    assert (retry.attempt, retry.max_attempts) == (1, 1)
    assert health.paths == ["/health"]
    task.refresh_from_db()
    assert (task.paused, task.paused_by) == (False, "")
    assert runbook_notices(receiver, "/team") == []  # nobody is told of a retry
    entry = AuditEntry.platform.get(tenant=tenant, action="runbook.retry")
    assert entry.actor == "runbook" and entry.detail["retry_id"] == str(retry.id)
    assert entry.detail["health"] == "healthy"

    # Later failures past the threshold do not start the runbook again.
    fail_times(task, 1, django_capture_on_commit_callbacks)
    drain(notify_settings)
    assert len(runbook_retries(task)) == 1 and health.paths == ["/health"]


def test_healthy_but_the_retry_fails_pauses_and_tells_the_owner_by_mail(
    tenant_and_user, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    tenant, user = tenant_and_user
    user.email = "owner@example.com"
    user.save(update_fields=["email"])
    task = failing_task(tenant, health_check={"url": health.url}, owner=f"user:{user.username}")
    fail_times(task, 2, django_capture_on_commit_callbacks)
    drain(notify_settings)
    [retry] = runbook_retries(task)
    end_run(retry, "failed", django_capture_on_commit_callbacks)
    drain(notify_settings)

    task.refresh_from_db()
    assert task.paused and task.paused_by == "runbook" and task.paused_at is not None
    assert task.pause_note == (
        "paused by the runbook after 3 consecutive failures; the runbook's retry failed"
    )
    assert len(runbook_retries(task)) == 1  # no second retry
    assert health.paths == ["/health"]  # the retry's failure is not checked again
    [owner_mail] = [m for m in mail.outbox if m.to == ["owner@example.com"]]
    assert "paused by the runbook" in owner_mail.subject
    assert "the runbook's retry failed" in owner_mail.body
    assert f"/dashboard/tasks/{task.id}" in owner_mail.body
    assert "operations/runbooks.html#task-failing-repeatedly" in owner_mail.body
    [team] = runbook_notices(receiver, "/team")
    assert team["pause_note"] == task.pause_note


def test_unhealthy_service_pauses_with_the_status_and_tells_owner_and_on_failure(
    tenant, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    health.status = 503
    task = failing_task(tenant, health_check={"url": health.url})
    fail_times(task, 2, django_capture_on_commit_callbacks)
    drain(notify_settings)

    task.refresh_from_db()
    assert runbook_retries(task) == []
    assert task.paused and task.paused_by == "runbook"
    assert task.pause_note == (
        "paused by the runbook after 2 consecutive failures; "
        f"health check {health.url} answered 503 (expected 200)"
    )
    [owner] = runbook_notices(receiver, "/owner")
    [team] = runbook_notices(receiver, "/team")
    assert owner == team
    assert owner["event"] == "runbook_paused" and owner["task_id"] == str(task.id)
    assert owner["url"].endswith(f"/dashboard/tasks/{task.id}")
    assert owner["runbook_url"].endswith("operations/runbooks.html#task-failing-repeatedly")
    assert "answered 503 (expected 200)" in owner["text"]
    entry = AuditEntry.platform.get(tenant=tenant, action="runbook.pause")
    assert entry.actor == "runbook" and entry.detail["note"] == task.pause_note


def test_without_a_health_check_the_runbook_pauses_and_says_why(
    tenant, hooks, receiver, notify_settings, django_capture_on_commit_callbacks
):
    task = failing_task(tenant)
    fail_times(task, 2, django_capture_on_commit_callbacks)
    drain(notify_settings)
    task.refresh_from_db()
    assert task.paused and runbook_retries(task) == []
    assert "no health check is configured (policy.health_check)" in task.pause_note
    assert len(runbook_notices(receiver, "/owner")) == 1


def test_a_health_check_name_resolving_to_loopback_is_refused_and_nothing_is_fetched(
    tenant, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    """The tenant may reach 127.0.0.1 by that name only; the same address under another
    name is resolved when the check is made, refused, and counts as unhealthy."""
    disguised = f"http://{DISGUISED_LOOPBACK}:{health.port}/health"
    task = failing_task(tenant, health_check={"url": disguised})
    fail_times(task, 2, django_capture_on_commit_callbacks)
    drain(notify_settings)
    task.refresh_from_db()
    assert health.paths == []
    assert runbook_retries(task) == [] and task.paused
    assert f"health check {disguised} failed: ssrf_blocked" in task.pause_note
    assert "which is a loopback address" in task.pause_note


def test_the_recovery_notice_is_sent_once_with_the_failures_it_ended(
    tenant, hooks, receiver, notify_settings, django_capture_on_commit_callbacks
):
    task = make_task(
        tenant,
        name="recovering",
        retry_policy={"max_attempts": 1},
        notifications={"on_recovery": ["team-hook"]},
    )
    capture = django_capture_on_commit_callbacks
    fail_times(task, 3, capture)
    end_run(task_trigger(task=task), "success", capture)
    end_run(task_trigger(task=task), "success", capture)
    drain(notify_settings)
    [notice] = receiver.bodies("/team")
    assert notice["event"] == "recovery" and notice["failures"] == 3
    assert notice["text"] == "succeeded after 3 consecutive failed runs"
    assert TaskDefinition.platform.get(id=task.id).consecutive_failures == 0


def test_the_runbook_of_a_task_paused_meanwhile_does_nothing(
    tenant, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    task = failing_task(tenant, health_check={"url": health.url})
    fail_times(task, 2, django_capture_on_commit_callbacks)
    task_pause(task=task, note="maintenance", paused_by="user:alice")
    drain(notify_settings)
    task.refresh_from_db()
    assert (task.paused_by, task.pause_note) == ("user:alice", "maintenance")
    assert health.paths == [] and runbook_retries(task) == []
    assert runbook_notices(receiver, "/owner") == runbook_notices(receiver, "/team") == []


def test_owner_channels_are_the_tenants_own(tenant, receiver):
    NotificationChannel.objects.create(
        tenant=tenant, name="pager", kind="webhook", target=receiver.url + "/p"
    )
    task = make_task(tenant, name="owned", owner="pager")
    assert task.owner == "pager"


def test_another_tenant_cannot_health_check_a_host_only_the_victim_may_reach(
    tenant, tenant_factory, health, notify_settings, django_capture_on_commit_callbacks
):
    """The victim's tenant may reach 127.0.0.1 (its operator allowed it); the attacker's
    may not, under that name, `localhost.`, or a disguise resolved only when checked."""
    _attacker_tenant, attacker_admin = tenant_factory("attacker")
    attacker = jwt_client(attacker_admin)
    for url in (health.url, f"http://localhost.:{health.port}/health"):
        refused = attacker.post(
            "/api/v1/tasks",
            {
                "name": "probe",
                "schedule": {"type": "manual"},
                "handler": {"type": "python", "callable": "noop"},
                "policy": {"pause_after_failures": 1, "health_check": {"url": url}},
            },
            format="json",
        )
        assert refused.status_code == 400, refused.content
        assert refused.json()["field"] == "policy.health_check.url"
    disguised = f"http://{DISGUISED_LOOPBACK}:{health.port}/health"
    saved = attacker.post(
        "/api/v1/tasks",
        {
            "name": "probe",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
            "retry_policy": {"max_attempts": 1},
            "policy": {"pause_after_failures": 1, "health_check": {"url": disguised}},
        },
        format="json",
    )
    assert saved.status_code == 201, saved.content
    task = TaskDefinition.platform.get(id=saved.json()["id"])
    fail_times(task, 1, django_capture_on_commit_callbacks)
    drain(notify_settings)
    task.refresh_from_db()
    assert health.paths == []  # nothing was fetched for the attacker
    assert task.paused and "ssrf_blocked" in task.pause_note
    assert runbook_retries(task) == []


def test_two_deliveries_of_one_crossing_retry_once(
    tenant, hooks, receiver, health, notify_settings, django_capture_on_commit_callbacks
):
    """The broker delivers a crossing twice, the second while the first still runs (its
    turn held): the second skips; a third, after the first finished, finds its retry."""
    task = failing_task(tenant, health_check={"url": health.url})
    failed = task_trigger(task=task)
    end_run(failed, "failed", django_capture_on_commit_callbacks)  # 1 of 2: no runbook yet
    holder = get_redis()
    key = runbook_turn_key("task", str(task.id))
    assert holder.set(key, "the first delivery", nx=True, ex=60)
    try:
        second = task_runbook_run(task_id=str(task.id), execution_id=str(failed.id), failures=2)
    finally:
        holder.delete(key)
    assert second.action == "skipped" and "another delivery" in second.note
    assert runbook_retries(task) == [] and health.paths == []
    first = task_runbook_run(task_id=str(task.id), execution_id=str(failed.id), failures=2)
    assert first.action == "retried" and len(runbook_retries(task)) == 1
    assert holder.get(key) is None  # the turn is given back
    third = task_runbook_run(task_id=str(task.id), execution_id=str(failed.id), failures=2)
    assert third.action == "skipped" and len(runbook_retries(task)) == 1
    assert health.paths == ["/health"]
