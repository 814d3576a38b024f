"""Flower shows what ran: every published doorbell carries Celery's `shadow` name, the task's
own name (a batch: the names it rings), read here from the real Redis broker."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from project.celery import app
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.publish import (
    RUN_EXECUTION_TASK,
    batch_shadow,
    doorbell_message,
)
from scheduler_app.ringing.ring import ring
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_queued_runs, make_task


def _messages(redis_client, queue: str) -> list[dict]:
    prefix = app.conf.broker_transport_options.get("global_keyprefix") or ""
    raw = redis_client.lrange(prefix + queue, 0, -1)
    redis_client.delete(prefix + queue)
    return [json.loads(message) for message in reversed(raw)]  # LPUSH: oldest last


def _ids(message: dict) -> list[str]:
    args = json.loads(base64.b64decode(message["body"]))[0]
    return args[0] if isinstance(args[0], list) else args


def test_a_shadow_named_doorbell_is_exactly_what_send_task_would_have_written(redis_client):
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    queue = f"shadow-test-{uuid.uuid4().hex[:6]}"
    name = 'nightly "report" \u00e9t\u00e9'  # quotes and non-ASCII: escaped as json.dumps does
    bell = Doorbell(str(uuid.uuid4()), str(uuid.uuid4()), queue, task_name=name)
    with app.producer_or_acquire() as producer:
        app.send_task(
            RUN_EXECUTION_TASK,
            args=[bell.execution_id],
            kwargs={},
            queue=queue,
            routing_key=queue,
            producer=producer,
            headers={"tenant_id": bell.tenant_id, "tier": bell.queue},
            shadow=name,
        )
    theirs = json.loads(redis_client.lpop(prefix + queue))
    ours = json.loads(doorbell_message(bell, origin=theirs["headers"]["origin"]))
    assert ours["headers"]["shadow"] == theirs["headers"]["shadow"] == name
    for key in ("id", "root_id", "origin", "argsrepr"):
        ours["headers"].pop(key), theirs["headers"].pop(key)
    assert ours["headers"] == theirs["headers"]


@pytest.mark.django_db(transaction=True)
def test_a_triggered_run_is_published_under_its_task_name(tenant, redis_client, private_broker):
    task = make_task(tenant, name="nightly-report")
    execution = task_trigger(task=task)
    (message,) = _messages(redis_client, execution.queue)
    assert _ids(message) == [str(execution.id)]
    assert message["headers"]["task"] == RUN_EXECUTION_TASK  # the worker's task, unchanged
    assert message["headers"]["shadow"] == "nightly-report"


@pytest.mark.django_db
def test_doorbells_without_a_name_get_it_from_the_database_batches_too(
    tenant, redis_client, private_broker, settings
):
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    queue = f"shadow-{uuid.uuid4().hex[:6]}"
    due = timezone.now()
    report = make_task(tenant, name="nightly-report")
    export = make_task(tenant, name="export")
    runs = make_queued_runs(report, 3, queue=queue, due=due)
    runs += make_queued_runs(export, 1, queue=queue, due=due)
    bells = [Doorbell(str(run.id), str(tenant.id), queue) for run in runs]

    ring(bells[:1], sticky=False)
    (single,) = _messages(redis_client, queue)
    assert single["headers"]["shadow"] == "nightly-report"

    ring(bells[:3], sticky=False, batch=8, processes=1)
    (one_task,) = _messages(redis_client, queue)
    assert _ids(one_task) == [str(run.id) for run in runs[:3]]
    assert one_task["headers"]["shadow"] == "nightly-report (batch of 3)"

    ring(bells, sticky=False, batch=8, processes=1)
    (mixed,) = _messages(redis_client, queue)
    assert mixed["headers"]["shadow"] == "nightly-report, export (batch of 4)"


def test_batch_shadow_names_at_most_three_tasks():
    bells = [Doorbell(str(i), "t", "q", task_name=f"task-{i % 5}") for i in range(40)]
    assert batch_shadow(bells) == "task-0, task-1, task-2 +2 more (batch of 40)"
    assert batch_shadow([Doorbell("x", "t", "q")]) is None


@pytest.mark.django_db
def test_fired_runs_are_named_from_their_task_id_and_a_rename_shows_after_the_cache(
    tenant, redis_client, private_broker, settings, monkeypatch
):
    from scheduler_app.ringing import publish as dispatch
    from scheduler_app.services.firing import Fire, fires_record

    settings.FAIR_INFLIGHT_PER_TENANT = 0
    queue = f"shadow-{uuid.uuid4().hex[:6]}"
    task = make_task(tenant, name="minutely")
    now = timezone.now()

    def fire(offset: int) -> list[Doorbell]:
        due = now + timedelta(seconds=offset)
        fired = Fire(task.id, tenant.id, due, priority=5, queue=queue, max_attempts=1)
        return fires_record([fired], now=now)

    (bell,) = fire(0)
    assert bell.task_id == str(task.id) and bell.task_name is None
    ring([bell], sticky=False)
    assert _messages(redis_client, queue)[0]["headers"]["shadow"] == "minutely"

    type(task).platform.filter(id=task.id).update(name="every-minute")
    ring(fire(1), sticky=False)  # within the cache's lifetime: the name it knew
    assert _messages(redis_client, queue)[0]["headers"]["shadow"] == "minutely"
    monkeypatch.setattr(dispatch, "TASK_NAME_CACHE_SECONDS", 0.0)
    ring(fire(2), sticky=False)
    assert _messages(redis_client, queue)[0]["headers"]["shadow"] == "every-minute"
