"""The `celery` handler: validation, and a real send through the broker."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from workers.handlers import (
    HandlerConfigError,
    HandlerContext,
    run_handler,
    validate_handler_config,
)
from workers.handlers.base import BufferedLogSink


def _validate(config):
    return validate_handler_config(config, python_registry_names=(), container_runtime=None)


def test_valid_config_is_normalised_with_the_default_queue():
    assert _validate({"type": "celery", "task": "proj.tasks.report"}) == {
        "type": "celery",
        "task": "proj.tasks.report",
        "args": [],
        "kwargs": {},
        "queue": "celery",
    }


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"type": "celery"}, "handler.task"),
        ({"type": "celery", "task": "x y"}, "handler.task"),
        ({"type": "celery", "task": "a.b", "args": {"no": 1}}, "handler.args"),
        ({"type": "celery", "task": "a.b", "kwargs": [1]}, "handler.kwargs"),
        ({"type": "celery", "task": "a.b", "queue": "bad queue"}, "handler.queue"),
        ({"type": "celery", "task": "a.b", "countdown": 5}, "handler.countdown"),
    ],
)
def test_invalid_configs_name_the_field(config, field):
    with pytest.raises(HandlerConfigError) as error:
        _validate(config)
    assert error.value.field == field


def _context() -> HandlerContext:
    return HandlerContext(
        execution_id=str(uuid.uuid4()),
        attempt=1,
        timeout_seconds=10,
        parameters={},
        log=BufferedLogSink(max_bytes=10_000),
        cancel_event=threading.Event(),
    )


def test_sends_the_named_task_with_its_arguments_to_the_queue(redis_client):
    from project.celery import app

    queue = f"legacy-{uuid.uuid4().hex[:8]}"
    config = {
        "type": "celery",
        "task": "reports.nightly",
        "args": [1],
        "kwargs": {"r": "eu"},
        "queue": queue,
    }
    outcome = run_handler(config, _context(), celery_send_task=app.send_task)
    assert outcome.status == "success", outcome.error_message
    raw = redis_client.lpop(queue)
    assert raw is not None and redis_client.llen(queue) == 0
    message = json.loads(raw)
    assert message["headers"]["task"] == "reports.nightly"
    assert outcome.result["celery_task_id"] == message["headers"]["id"]


def test_a_broker_error_is_a_transient_failure():
    def refuse(*args, **kwargs):
        raise ConnectionError("broker down")

    outcome = run_handler({"type": "celery", "task": "a.b"}, _context(), celery_send_task=refuse)
    assert (outcome.status, outcome.error_class, outcome.transient) == (
        "failed",
        "celery_send",
        True,
    )
