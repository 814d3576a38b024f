"""Sending doorbells to the broker: execution ids onto their queue.

This is the last step of ringing (`scheduler_app.ringing.ring.ring`: admit, hold back,
route, publish), and the only one that talks to the broker; ring, not `publish`, is what a
caller uses, so that no run reaches the broker past fair dispatch or sticky routing.

A broker message carries only the execution id and the tenant (for routing); the
worker reads everything else from the database when it claims, so a forged, replayed
or stale message can at most ring a bell that the claim refuses.

Publishing is pipelined: a batch of doorbells goes to Redis in one round trip. With a
Redis broker the messages are built here, in exactly the shape kombu's Redis transport
writes for `send_task` (Celery task protocol 2, JSON), and LPUSHed in a non-transactional
pipeline; `apply_async` in a loop costs one round trip and ~200 µs of Python per message,
which caps a leader near 5,000 fires/s. Other brokers go through kombu's producer batch.
The worker consumes both as ordinary `workers.run_execution` tasks.

A burst may ring in batches (`ring(..., batch=N)`): up to N doorbells of one tenant and
tier (fewer for a smaller burst, see `batch_size`) travel as one
`workers.run_execution_batch` message, which a worker claims with one statement and
finishes with one (see `workers.runner`). Celery's per-message cost and the per-run
round trips are then paid once per batch; that is what lets two cores keep up with 833
fires/s.

Every message carries Celery's `shadow` name: the task's own name, so Flower (and the
worker's log) shows a run as `nightly-report`, not as `workers.run_execution` with an id a
person cannot place. A batch message is named after the tasks it rings:
`nightly-report (batch of 40)` when they are one task's runs, else the first few names,
`a, b, c +2 more (batch of 40)`. A doorbell carries its task's name, or its task's id (the
name then comes from a per-process cache of task names, refreshed after
TASK_NAME_CACHE_SECONDS, so a renamed task shows its new name within a minute), or neither
(then one query per ring reads the names through the executions): `with_task_names`, which
ring calls on the doorbells it admitted. If reading fails, messages go without a shadow
name, never without the doorbell.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence

import redis
from celery import current_app as app

from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.redis_client import is_redis_url, redis_from_url
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.task_names import task_display_name

logger = logging.getLogger(__name__)

RUN_EXECUTION_TASK = "workers.run_execution"
RUN_BATCH_TASK = "workers.run_execution_batch"
# Messages per Redis round trip.
PUBLISH_BATCH_SIZE = 1000


# The longest shadow name put on a message (Flower's columns are narrow anyway).
SHADOW_MAX_CHARS = 200
# Task names by task id, per process: the hot paths (fires, DAG nodes) ring by task id and
# should not pay a query per publish for a name (a lookup through the executions table took
# ~2 ms on a loaded machine, about what a DAG child's whole start costs; a cached name, µs).
TASK_NAME_CACHE_SECONDS = 60.0
TASK_NAME_CACHE_MAX = 50_000
_task_names: dict[str, tuple[str, float]] = {}


_local = threading.local()


def _broker_client() -> tuple[redis.Redis, str] | None:
    """A Redis client for the broker (per process and thread) and its key prefix, or None
    when the broker is not Redis."""

    url = app.conf.broker_url or ""
    if not is_redis_url(url):
        return None
    prefix = (app.conf.broker_transport_options or {}).get("global_keyprefix") or ""
    # Keyed by everything that decides where a message lands: a forked child must not share
    # the parent's socket, and a changed broker URL or key prefix needs a fresh client.
    identity = (os.getpid(), url, prefix)
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != identity:
        cached = (identity, redis_from_url(url), prefix)
        _local.client = cached
    return cached[1], cached[2]


_BODY = '[%s, {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
# The JSON `json.dumps` produces for the message below, as a template: ids are UUID strings
# and queues/origins plain names, so nothing needs escaping; a test pins it to json.dumps.
_MESSAGE = (
    '{"body": "%(body)s", "content-encoding": "utf-8", "content-type": "application/json", '
    '"headers": {"lang": "py", "task": "%(task)s", "id": "%(task_id)s", '
    '"shadow": %(shadow)s, "eta": null, "expires": null, "group": null, "group_index": null, '
    '"retries": 0, "timelimit": [null, null], "root_id": "%(task_id)s", "parent_id": null, '
    '"argsrepr": "%(argsrepr)s", "kwargsrepr": "{}", "origin": "%(origin)s", '
    '"ignore_result": null, "replaced_task_nesting": 0, "stamped_headers": null, "stamps": {}, '
    '"tenant_id": "%(tenant_id)s", "tier": "%(tier)s"}, '
    '"properties": {"correlation_id": "%(task_id)s", '
    '"delivery_mode": 2, "delivery_info": {"exchange": "", "routing_key": "%(queue)s"}, '
    '"priority": 0, "body_encoding": "base64", "delivery_tag": "%(delivery_tag)s"}}'
)


def _message(
    *,
    task: str,
    args: str,
    argsrepr: str,
    bell: Doorbell,
    origin: str,
    tier: str | None,
    shadow: str | None,
    task_id: str | None = None,
) -> str:
    # The delivery tag is the message's own (kombu's Redis transport keys its unacked
    # messages by it: a republished doorbell is another message); the task id is what
    # Celery and Flower call the task.
    delivery_tag = uuid.uuid4()
    return _MESSAGE % {
        "body": base64.b64encode((_BODY % args).encode()).decode(),
        "task": task,
        # A task name is any text: json.dumps quotes and escapes it (ASCII only). A DAG node's
        # hidden task reads "dag > node (v1)", as in the dashboard and the admin.
        "shadow": json.dumps(task_display_name(shadow)[:SHADOW_MAX_CHARS]) if shadow else "null",
        "task_id": task_id or delivery_tag,
        "argsrepr": argsrepr,
        "origin": origin,
        "tenant_id": bell.tenant_id,
        "tier": tier or bell.queue,
        "queue": bell.queue,
        "delivery_tag": delivery_tag,
    }


def doorbell_message(bell: Doorbell, *, origin: str, tier: str | None = None) -> str:
    """The JSON kombu's Redis transport stores for `send_task(RUN_EXECUTION_TASK, [id],
    shadow=<task name>)` with the headers `tenant_id` and `tier` (the tier the doorbell was
    admitted under, which differs from the queue when sticky routing sends it to a worker's
    own queue). The Celery task id is the execution id, so Flower's row of the run is found by
    the id the dashboard shows (a duplicate delivery of the same run shares it; the one that
    ends the run reports its state: workers.celery_outcome)."""
    return _message(
        task=RUN_EXECUTION_TASK,
        task_id=bell.execution_id,
        args=f'["{bell.execution_id}"]',
        argsrepr=f"['{bell.execution_id}']",
        bell=bell,
        origin=origin,
        tier=tier,
        shadow=bell.task_name,
    )


def batch_shadow(bells: Sequence[Doorbell]) -> str | None:
    """A batch's name in Flower: `name (batch of N)` for one task's runs, else the first
    three names and how many more; None when no name is known."""
    names = list(dict.fromkeys(bell.task_name for bell in bells if bell.task_name))
    if not names:
        return None
    shown = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
    return f"{shown} (batch of {len(bells)})"


def batch_message(bells: Sequence[Doorbell], *, origin: str, tier: str | None = None) -> str:
    """`send_task(RUN_BATCH_TASK, [[id, ...]], shadow=batch_shadow(bells))` for doorbells of
    one tenant and queue (the first one's tenant and queue head the message)."""
    ids = [bell.execution_id for bell in bells]
    return _message(
        task=RUN_BATCH_TASK,
        args="[[" + ", ".join(f'"{i}"' for i in ids) + "]]",
        argsrepr="[[" + ", ".join(f"'{i}'" for i in ids) + "]]",
        bell=bells[0],
        origin=origin,
        tier=tier,
        shadow=batch_shadow(bells),
    )


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _names_by_task(task_ids: set[str]) -> dict[str, str]:
    """Names of these tasks: from the cache, the missing ones in one query."""

    now = time.monotonic()
    names: dict[str, str] = {}
    missing = []
    for task_id in task_ids:
        cached = _task_names.get(task_id)
        if cached is not None and now - cached[1] < TASK_NAME_CACHE_SECONDS:
            names[task_id] = cached[0]
        elif (parsed := _uuid_or_none(task_id)) is not None:
            missing.append(parsed)
    if missing:
        if len(_task_names) > TASK_NAME_CACHE_MAX:
            _task_names.clear()
        for task_id, name in TaskDefinition.platform.filter(id__in=missing).values_list(
            "id", "name"
        ):
            names[str(task_id)] = name
            _task_names[str(task_id)] = (name, now)
    return names


def _names_by_execution(execution_ids: set[str]) -> dict[str, str]:
    wanted = [parsed for i in execution_ids if (parsed := _uuid_or_none(i)) is not None]
    if not wanted:
        return {}
    rows = TaskExecution.platform.filter(id__in=wanted).values_list("id", "task__name")
    return {str(execution_id): name for execution_id, name in rows}


def with_task_names(bells: list[Doorbell]) -> list[Doorbell]:
    """The doorbells, each with its task's name where it can be found."""
    unnamed = [bell for bell in bells if bell.task_name is None]
    if not unnamed:
        return bells
    try:
        by_task = _names_by_task({b.task_id for b in unnamed if b.task_id})
        by_execution = _names_by_execution({b.execution_id for b in unnamed if not b.task_id})
    except Exception:  # a name is for people watching Flower: never let it stop a publish
        logger.exception("could not read task names for the doorbells' shadow names")
        return bells

    def named(bell: Doorbell) -> Doorbell:
        if bell.task_name is not None:
            return bell
        name = by_task.get(bell.task_id or "") or by_execution.get(bell.execution_id)
        if not name:
            return bell
        # Not dataclasses.replace: this runs per doorbell of a fire storm, and replace()
        # inspects the fields each time (several times slower).
        return Doorbell(
            execution_id=bell.execution_id,
            tenant_id=bell.tenant_id,
            queue=bell.queue,
            task_name=name,
            task_id=bell.task_id,
            traceparent=bell.traceparent,
        )

    return [named(bell) for bell in bells]


# A burst is cut into at least this many messages, so every worker process gets a share.
BURST_MESSAGES = 16


def batch_size(count: int, limit: int, processes: int | None = None) -> int:
    """Doorbells per message for `count` of one tenant and tier rung together, at most
    `limit`: one message per worker process (`processes`, the fleet's live concurrency;
    BURST_MESSAGES when unknown), so every process claims one share of a burst, ahead of its
    time when it was rung ahead, and none waits behind a second one. A small burst (under
    two per process) rings one per message and its runs start in parallel; a big one pays
    Celery's per-message cost and the per-run round trips once per batch."""
    processes = processes or BURST_MESSAGES
    if count < 2 * processes:
        return 1
    return min(limit, -(-count // processes))


def batches(
    bells: Sequence[Doorbell],
    size: Callable[[int], int],
    tiers: dict[str, str] | None = None,
) -> list[list[Doorbell]]:
    """The doorbells cut into groups that share tenant, queue and admitted tier (`tiers`, by
    execution id), of at most `size(n)` for a group of n doorbells in all, in the order they
    came (a group's first doorbell decides its place)."""
    tiers = tiers or {}

    def key(bell: Doorbell) -> tuple[str, str, str]:
        return (bell.tenant_id, bell.queue, tiers.get(bell.execution_id, bell.queue))

    totals = Counter(key(bell) for bell in bells)
    groups: dict[tuple[str, str, str], list[list[Doorbell]]] = {}
    ordered: list[list[Doorbell]] = []
    for bell in bells:
        group = key(bell)
        chunks = groups.setdefault(group, [])
        if not chunks or len(chunks[-1]) >= size(totals[group]):
            chunks.append([])
            ordered.append(chunks[-1])
        chunks[-1].append(bell)
    return ordered


def publish(
    bells: Sequence[Doorbell],
    *,
    batch: int = 1,
    processes: int | None = None,
    tiers: dict[str, str] | None = None,
) -> int:
    """Send doorbells that were admitted and routed (`services.ringing.ring`), a batch per
    Redis round trip. Returns how many were sent.

    `tiers`: the tier each doorbell was admitted under, by execution id, when sticky routing
    changed its queue (it stays in the message, so the worker releases the right fairness
    slot); by default its queue. `batch` > 1 rings up to that many doorbells of one tenant
    and queue with one message, as many as `batch_size` says for the size of the burst and
    the fleet's `processes`.
    """
    if not bells:
        return 0
    tiers = tiers if tiers is not None else {bell.execution_id: bell.queue for bell in bells}
    if batch > 1:
        groups = batches(bells, lambda count: batch_size(count, batch, processes), tiers)
    else:
        groups = [[bell] for bell in bells]
    broker = _broker_client()
    if broker is None:
        return _publish_with_kombu(groups, tiers)
    client, prefix = broker
    origin = f"{os.getpid()}@{socket.gethostname()}"
    sent = 0
    pipe = client.pipeline(transaction=False)
    for group in groups:
        head = group[0]
        tier = tiers.get(head.execution_id)
        if len(group) == 1:
            message = doorbell_message(head, origin=origin, tier=tier)
        else:
            message = batch_message(group, origin=origin, tier=tier)
        pipe.lpush(prefix + head.queue, message)
        sent += len(group)
        if len(pipe) >= PUBLISH_BATCH_SIZE:
            pipe.execute()
            pipe = client.pipeline(transaction=False)
    if len(pipe):
        pipe.execute()
    return sent


def _publish_with_kombu(groups: list[list[Doorbell]], tiers: dict[str, str]) -> int:
    with app.producer_or_acquire() as producer, producer.batch(max_size=PUBLISH_BATCH_SIZE):
        for group in groups:
            head = group[0]
            single = len(group) == 1
            app.send_task(
                RUN_EXECUTION_TASK if single else RUN_BATCH_TASK,
                args=[head.execution_id] if single else [[b.execution_id for b in group]],
                kwargs={},
                shadow=task_display_name(head.task_name or "") or None
                if single
                else batch_shadow(group),
                # A single run's Celery task id is its execution id (see doorbell_message).
                task_id=head.execution_id if single else None,
                queue=head.queue,
                routing_key=head.queue,
                producer=producer,
                headers={
                    "tenant_id": head.tenant_id,
                    "tier": tiers.get(head.execution_id, head.queue),
                },
            )
    return sum(len(group) for group in groups)
