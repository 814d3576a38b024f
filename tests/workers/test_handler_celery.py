"""The `celery` handler: validation, and a real send through the broker."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from handler_contract.base import BufferedLogSink, HandlerConfigError, HandlerContext
from handler_contract.validation import validate_handler_config
from workers.handlers import run_handler

ALLOWED = ("proj.tasks.report", "a.b", "reports.nightly@legacy")


def _validate(config, allowed=ALLOWED):
    return validate_handler_config(
        config, python_registry_names=(), container_runtime=None, celery_allowed_tasks=allowed
    )


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


def test_nothing_may_be_sent_while_celery_handler_tasks_is_empty():
    with pytest.raises(HandlerConfigError) as error:
        _validate({"type": "celery", "task": "proj.tasks.report"}, allowed=())
    assert error.value.field == "handler.task"
    assert "CELERY_HANDLER_TASKS" in error.value.message


def test_a_listed_task_goes_only_to_its_listed_queue():
    assert _validate({"type": "celery", "task": "reports.nightly", "queue": "legacy"})["queue"]
    for queue in ("celery", "other"):
        with pytest.raises(HandlerConfigError) as error:
            _validate({"type": "celery", "task": "reports.nightly", "queue": queue})
        assert error.value.field == "handler.task"


@pytest.mark.parametrize(
    "task",
    ["workers.tasks.run_execution", "scheduler_app.tasks.fire", "dags.tasks.x", "celery.ping"],
)
def test_the_platforms_own_tasks_are_refused_even_when_listed(task):
    with pytest.raises(HandlerConfigError) as error:
        _validate({"type": "celery", "task": task}, allowed=(task,))
    assert error.value.field == "handler.task"


@pytest.mark.parametrize(
    "queue",
    [
        "critical",
        "normal",
        "bulk",
        "worker.celery@host-1",
        "normal.egress",
        "critical.container",
        "bulk.egress",
    ],
)
def test_the_platforms_queues_are_refused_even_when_listed(queue):
    with pytest.raises(HandlerConfigError) as error:
        _validate({"type": "celery", "task": "a.b", "queue": queue}, allowed=(f"a.b@{queue}",))
    assert error.value.field == "handler.queue"


def test_the_refused_queues_are_the_platforms_tiers_and_their_capability_queues():
    from handler_contract.validation import PLATFORM_QUEUES, celery_platform_queue
    from scheduler_app.capabilities import PARTIAL_CAPABILITIES, capability_queues
    from scheduler_app.choices import TIERS

    assert set(PLATFORM_QUEUES) == set(TIERS)
    for capability in PARTIAL_CAPABILITIES:
        assert all(celery_platform_queue(queue) for queue in capability_queues(capability))


def test_the_worker_refuses_an_unlisted_task_at_run_time_and_sends_nothing():
    sent = []
    outcome = run_handler(
        {"type": "celery", "task": "workers.tasks.run_execution", "args": ["x"]},
        _context(),
        celery_send_task=lambda *a, **k: sent.append(a),
        celery_allowed_tasks=("workers.tasks.run_execution",),
    )
    assert (outcome.status, outcome.error_class, outcome.transient) == (
        "failed",
        "invalid_config",
        False,
    )
    assert sent == []


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
    allowed = (f"reports.nightly@{queue}",)
    config = {
        "type": "celery",
        "task": "reports.nightly",
        "args": [1],
        "kwargs": {"r": "eu"},
        "queue": queue,
    }
    outcome = run_handler(
        config, _context(), celery_send_task=app.send_task, celery_allowed_tasks=allowed
    )
    assert outcome.status == "success", outcome.error_message
    raw = redis_client.lpop(queue)
    assert raw is not None and redis_client.llen(queue) == 0
    message = json.loads(raw)
    assert message["headers"]["task"] == "reports.nightly"
    assert outcome.result["celery_task_id"] == message["headers"]["id"]


def test_a_broker_error_is_a_transient_failure():
    def refuse(*args, **kwargs):
        raise ConnectionError("broker down")

    outcome = run_handler(
        {"type": "celery", "task": "a.b"},
        _context(),
        celery_send_task=refuse,
        celery_allowed_tasks=ALLOWED,
    )
    assert (outcome.status, outcome.error_class, outcome.transient) == (
        "failed",
        "celery_send",
        True,
    )
