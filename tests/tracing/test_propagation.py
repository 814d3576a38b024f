"""What a traced run passes on: the `traceparent` header to an http task's receiver and to a
notification webhook, TRACEPARENT to a shell task's command (inside the sandbox's controlled
environment) and to a container's. Real receivers on loopback, real sandboxed processes;
this process plays the beat and the worker."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.services.delivery import Target, deliver
from alerting.services.notices import run_message
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.services.firing import Fire, fires_record
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.alerting.receiver import Receiver
from tests.factories import make_task
from tests.tracing.conftest import by_name
from tracing.context import traceparent_of
from workers.handlers.container import build_container_argv
from workers.runner import execution_run

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "trace-propagation@host"


def _run(task) -> TaskExecution:
    fire = Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=timezone.now() - timedelta(milliseconds=50),
        priority=5,
        queue=f"trace-{uuid.uuid4().hex[:8]}",
        max_attempts=1,
    )
    (bell,) = fires_record([fire], now=timezone.now())
    execution_run(execution_id=bell.execution_id, worker_id=WORKER)
    return TaskExecution.platform.get(id=bell.execution_id)


def _handler_traceparent(spans) -> str:
    (handler,) = by_name(spans)["worker.run"]
    return traceparent_of(handler)


def test_an_http_task_sends_its_handler_spans_traceparent_header(tenant, spans):
    receiver = Receiver()
    tenant_webhook_hosts_set(tenant=tenant, hosts=["127.0.0.1"], actor="operator:test")
    task = make_task(
        tenant,
        name="traced-http",
        schedule={"type": "manual"},
        # A traceparent the tenant wrote itself is replaced by the run's own.
        handler={
            "type": "http",
            "url": f"{receiver.url}/hook",
            "method": "POST",
            "headers": {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        },
    )
    row = _run(task)
    assert row.status == "success", row.error_message
    (request,) = receiver.requests
    sent = {name.lower(): value for name, value in request["headers"].items()}
    assert sent["traceparent"] == _handler_traceparent(spans)
    assert sent["traceparent"].split("-")[1] == row.traceparent.split("-")[1]


def test_a_shell_task_sees_traceparent_in_its_sandboxed_environment(tenant, spans):
    task = make_task(
        tenant,
        name="traced-shell",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", 'echo "TP=$TRACEPARENT"; env']},
    )
    row = _run(task)
    assert row.status == "success", row.error_message
    log = ExecutionLog.platform.get(execution_id=row.id).text
    assert f"TP={_handler_traceparent(spans)}" in log
    # Only the context is added: nothing of the tracing setup reaches the command.
    assert "OTEL_" not in log


def test_a_shell_task_of_an_untraced_run_gets_no_traceparent(tenant):
    task = make_task(
        tenant,
        name="untraced-shell",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", 'echo "TP=[${TRACEPARENT-unset}]"']},
    )
    row = _run(task)
    assert "TP=[unset]" in ExecutionLog.platform.get(execution_id=row.id).text


def test_a_container_task_is_given_traceparent():
    argv = build_container_argv(
        {"image": "alpine:3", "command": ["true"]},
        "docker",
        task_env={"TRACEPARENT": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "OTHER": "x"},
    )
    assert f"TRACEPARENT=00-{'a' * 32}-{'b' * 16}-01" in argv
    assert not any(arg.startswith("OTHER=") for arg in argv)


def test_a_notification_webhook_carries_the_runs_traceparent_header_not_in_its_body(tenant, spans):
    receiver = Receiver()
    task = make_task(tenant, name="traced-notice", schedule={"type": "manual"})
    row = _run(task)
    assert row.traceparent
    result = deliver(
        Target("webhook", f"{receiver.url}/notify", tenant_id=str(tenant.id)),
        run_message(row, event="failure"),
        signing_secret="s3cret",
        allowed_hosts=["127.0.0.1"],
    )
    assert result.ok, result.detail
    (request,) = receiver.requests
    sent = {name.lower(): value for name, value in request["headers"].items()}
    assert sent["traceparent"] == row.traceparent
    assert b"traceparent" not in request["body"]  # the signed body is what it always was
