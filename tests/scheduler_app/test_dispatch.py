"""Pipelined doorbells are the same messages Celery's own send_task writes."""

from __future__ import annotations

import base64
import json
import uuid

from django.conf import settings

from project.celery import app
from scheduler_app.dispatch import RUN_EXECUTION_TASK, Doorbell, doorbell_message, publish


def _volatile(message: dict) -> dict:
    """Drop what differs between any two messages (ids, origin, the execution id)."""
    message = json.loads(json.dumps(message))
    for key in ("id", "root_id", "origin", "argsrepr"):
        message["headers"].pop(key, None)
    for key in ("correlation_id", "delivery_tag", "reply_to"):
        message["properties"].pop(key, None)
    message.pop("body")
    return message


def test_a_doorbell_is_exactly_what_send_task_would_have_written(redis_client):
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    queue = f"dispatch-test-{uuid.uuid4().hex[:6]}"
    bell = Doorbell(str(uuid.uuid4()), str(uuid.uuid4()), queue)
    with app.producer_or_acquire() as producer:
        app.send_task(
            RUN_EXECUTION_TASK,
            args=[bell.execution_id],
            kwargs={},
            queue=queue,
            routing_key=queue,
            producer=producer,
            headers={"tenant_id": bell.tenant_id, "tier": bell.queue},
        )
    theirs = json.loads(redis_client.lpop(prefix + queue))
    ours = json.loads(doorbell_message(bell, origin=theirs["headers"]["origin"]))
    assert _volatile(ours) == _volatile(theirs)
    assert base64.b64decode(ours["body"]) == base64.b64decode(theirs["body"])
    assert ours["headers"]["argsrepr"] == theirs["headers"]["argsrepr"]


def test_publish_pipelines_every_doorbell_onto_its_queue(redis_client, settings):
    settings.FAIR_INFLIGHT_PER_TENANT = 0  # one tenant's 2,500: this test is about pipelining
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    queue = f"dispatch-test-{uuid.uuid4().hex[:6]}"
    bells = [Doorbell(str(uuid.uuid4()), "t", queue) for _ in range(2500)]
    assert publish(bells) == 2500
    stored = redis_client.lrange(prefix + queue, 0, -1)
    ids = {json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in stored}
    assert ids == {bell.execution_id for bell in bells}
    redis_client.delete(prefix + queue)
