"""Pipelined doorbells are the same messages Celery's own send_task writes."""

from __future__ import annotations

import base64
import json
import uuid

from django.conf import settings

from project.celery import app
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.publish import (
    BURST_MESSAGES,
    RUN_BATCH_TASK,
    RUN_EXECUTION_TASK,
    batch_message,
    batch_size,
    batches,
    doorbell_message,
    publish,
)


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
            task_id=bell.execution_id,
            queue=queue,
            routing_key=queue,
            producer=producer,
            headers={"tenant_id": bell.tenant_id, "tier": bell.queue},
        )
    theirs = json.loads(redis_client.lpop(prefix + queue))
    ours = json.loads(doorbell_message(bell, origin=theirs["headers"]["origin"]))
    assert _volatile(ours) == _volatile(theirs)
    # Celery (and Flower) call a single run's task by its execution id; the delivery tag
    # stays the message's own (a republished doorbell is another message).
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == bell.execution_id
    assert ours["properties"]["correlation_id"] == theirs["properties"]["correlation_id"]
    assert ours["properties"]["delivery_tag"] != bell.execution_id
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


def test_a_batch_doorbell_is_exactly_what_send_task_would_have_written(redis_client):
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    queue = f"dispatch-test-{uuid.uuid4().hex[:6]}"
    tenant = str(uuid.uuid4())
    bells = [Doorbell(str(uuid.uuid4()), tenant, queue) for _ in range(3)]
    with app.producer_or_acquire() as producer:
        app.send_task(
            RUN_BATCH_TASK,
            args=[[bell.execution_id for bell in bells]],
            kwargs={},
            queue=queue,
            routing_key=queue,
            producer=producer,
            headers={"tenant_id": tenant, "tier": queue},
        )
    theirs = json.loads(redis_client.lpop(prefix + queue))
    ours = json.loads(batch_message(bells, origin=theirs["headers"]["origin"]))
    assert _volatile(ours) == _volatile(theirs)
    assert base64.b64decode(ours["body"]) == base64.b64decode(theirs["body"])
    assert ours["headers"]["argsrepr"] == theirs["headers"]["argsrepr"]


def test_batches_keep_one_tenant_queue_and_tier_per_message_in_arrival_order():
    a = [Doorbell(f"a{i}", "ta", "normal") for i in range(5)]
    b = [Doorbell(f"b{i}", "tb", "normal") for i in range(2)]
    c = [Doorbell(f"c{i}", "ta", "critical") for i in range(1)]
    mixed = [a[0], b[0], a[1], c[0], a[2], b[1], a[3], a[4]]
    groups = batches(mixed, lambda total: 2)
    assert [[bell.execution_id for bell in group] for group in groups] == [
        ["a0", "a1"],
        ["b0", "b1"],
        ["c0"],
        ["a2", "a3"],
        ["a4"],
    ]
    # A doorbell sticky-routed into another queue keeps the tier it was admitted under:
    # two tiers never share a message.
    routed = [Doorbell("x", "ta", "w1"), Doorbell("y", "ta", "w1")]
    split = batches(routed, lambda total: 16, {"x": "normal", "y": "critical"})
    assert [[bell.execution_id for bell in group] for group in split] == [["x"], ["y"]]


def test_a_burst_is_cut_so_every_worker_process_gets_a_share():
    assert [batch_size(n, 64) for n in (1, 10, 2 * BURST_MESSAGES - 1)] == [1, 1, 1]
    assert batch_size(100, 64) == 7  # 15 messages: at most one per process (16)
    assert batch_size(833, 64) == 53  # 16 messages
    assert batch_size(100_000, 64) == 64
    assert batch_size(833, 1) == 1


def test_publish_in_batches_rings_every_doorbell_once(redis_client, settings):
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    queue, small = (f"dispatch-test-{uuid.uuid4().hex[:6]}" for _ in range(2))
    bells = [Doorbell(str(uuid.uuid4()), "t", queue) for _ in range(100)]
    few = [Doorbell(str(uuid.uuid4()), "t", small) for _ in range(5)]
    assert publish([*bells, *few], batch=64) == 105
    stored = [json.loads(m) for m in redis_client.lrange(prefix + queue, 0, -1)]
    assert len(stored) == 15  # 14 x 7 + 2
    rung = []
    for message in stored:
        (args, _, _) = json.loads(base64.b64decode(message["body"]))
        assert message["headers"]["task"] == RUN_BATCH_TASK
        rung.extend(args[0])
    assert sorted(rung) == sorted(bell.execution_id for bell in bells)
    # A small burst rings one doorbell per message: its runs start in parallel.
    singles = [json.loads(m) for m in redis_client.lrange(prefix + small, 0, -1)]
    assert [m["headers"]["task"] for m in singles] == [RUN_EXECUTION_TASK] * 5
    redis_client.delete(prefix + queue, prefix + small)
