"""Ringing the doorbell: publish execution ids to their tier queue.

A broker message carries only the execution id and the tenant (for routing); the
worker reads everything else from the database when it claims, so a forged, replayed
or stale message can at most ring a bell that the claim refuses.

Publishing is pipelined: a batch of doorbells goes to Redis in one round trip. With a
Redis broker the messages are built here, in exactly the shape kombu's Redis transport
writes for `send_task` (Celery task protocol 2, JSON), and LPUSHed in a non-transactional
pipeline; `apply_async` in a loop costs one round trip and ~200 µs of Python per message,
which caps a leader near 5,000 fires/s. Other brokers go through kombu's producer batch.
The worker consumes both as ordinary `workers.run_execution` tasks.
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import redis

logger = logging.getLogger(__name__)

RUN_EXECUTION_TASK = "workers.run_execution"
# Messages per Redis round trip.
PUBLISH_BATCH_SIZE = 1000


@dataclass(frozen=True)
class Doorbell:
    execution_id: str
    tenant_id: str
    queue: str


_local = threading.local()


def _broker_client() -> tuple[redis.Redis, str] | None:
    """A Redis client for the broker (per process and thread) and its key prefix, or None
    when the broker is not Redis."""
    from project.celery import app  # models never import the Celery app; dispatch does

    url = app.conf.broker_url or ""
    if not url.startswith(("redis://", "rediss://")):
        return None
    prefix = (app.conf.broker_transport_options or {}).get("global_keyprefix") or ""
    # Keyed by everything that decides where a message lands: a forked child must not share
    # the parent's socket, and a changed broker URL or key prefix needs a fresh client.
    identity = (os.getpid(), url, prefix)
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != identity:
        cached = (identity, redis.Redis.from_url(url), prefix)
        _local.client = cached
    return cached[1], cached[2]


_BODY = '[["%s"], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
# The JSON `json.dumps` produces for the message below, as a template: ids are UUID strings
# and queues/origins plain names, so nothing needs escaping; a test pins it to json.dumps.
_MESSAGE = (
    '{"body": "%(body)s", "content-encoding": "utf-8", "content-type": "application/json", '
    '"headers": {"lang": "py", "task": "' + RUN_EXECUTION_TASK + '", "id": "%(task_id)s", '
    '"shadow": null, "eta": null, "expires": null, "group": null, "group_index": null, '
    '"retries": 0, "timelimit": [null, null], "root_id": "%(task_id)s", "parent_id": null, '
    '"argsrepr": "[\'%(execution_id)s\']", "kwargsrepr": "{}", "origin": "%(origin)s", '
    '"ignore_result": null, "replaced_task_nesting": 0, "stamped_headers": null, "stamps": {}, '
    '"tenant_id": "%(tenant_id)s", "tier": "%(tier)s"}, '
    '"properties": {"correlation_id": "%(task_id)s", '
    '"delivery_mode": 2, "delivery_info": {"exchange": "", "routing_key": "%(queue)s"}, '
    '"priority": 0, "body_encoding": "base64", "delivery_tag": "%(delivery_tag)s"}}'
)


def doorbell_message(bell: Doorbell, *, origin: str, tier: str | None = None) -> str:
    """The JSON kombu's Redis transport stores for `send_task(RUN_EXECUTION_TASK, [id])`
    with the headers `tenant_id` and `tier` (the tier the doorbell was admitted under,
    which differs from the queue when sticky routing sends it to a worker's own queue)."""
    return _MESSAGE % {
        "body": base64.b64encode((_BODY % bell.execution_id).encode()).decode(),
        "task_id": uuid.uuid4(),
        "execution_id": bell.execution_id,
        "origin": origin,
        "tenant_id": bell.tenant_id,
        "tier": tier or bell.queue,
        "queue": bell.queue,
        "delivery_tag": uuid.uuid4(),
    }


def publish(doorbells: Iterable[Doorbell]) -> int:
    """Publish doorbells, a batch per Redis round trip. Returns how many were sent.

    Fair dispatch first: a tenant's doorbells beyond its in-flight cap in a tier are not
    sent but put back to `pending` (see `scheduler_app.fairness`). Then sticky routing may
    send a retry to the worker that ran its previous attempt (see `workers.routing`).
    """
    from scheduler_app.fairness import fair_admit
    from workers.routing import route

    bells = fair_admit(list(doorbells))
    if not bells:
        return 0
    # The tier each doorbell was admitted under, kept in the message even when sticky routing
    # sends it to a worker's own queue, so the worker releases the right fairness slot.
    tiers = {bell.execution_id: bell.queue for bell in bells}
    try:
        bells = route(bells)
    except Exception:  # stickiness is an optimisation: never let it stop a publish
        logger.exception("sticky routing failed; publishing to the tier queues")
    broker = _broker_client()
    if broker is None:
        return _publish_with_kombu(bells, tiers)
    client, prefix = broker
    origin = f"{os.getpid()}@{socket.gethostname()}"
    for start in range(0, len(bells), PUBLISH_BATCH_SIZE):
        pipe = client.pipeline(transaction=False)
        for bell in bells[start : start + PUBLISH_BATCH_SIZE]:
            message = doorbell_message(bell, origin=origin, tier=tiers.get(bell.execution_id))
            pipe.lpush(prefix + bell.queue, message)
        pipe.execute()
    return len(bells)


def _publish_with_kombu(bells: list[Doorbell], tiers: dict[str, str]) -> int:
    from project.celery import app

    with app.producer_or_acquire() as producer, producer.batch(max_size=PUBLISH_BATCH_SIZE):
        for bell in bells:
            app.send_task(
                RUN_EXECUTION_TASK,
                args=[bell.execution_id],
                kwargs={},
                queue=bell.queue,
                routing_key=bell.queue,
                producer=producer,
                headers={
                    "tenant_id": bell.tenant_id,
                    "tier": tiers.get(bell.execution_id, bell.queue),
                },
            )
    return len(bells)
