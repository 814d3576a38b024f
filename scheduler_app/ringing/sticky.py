"""Sticky routing: send a follow-up run (a retry, the next node of a DAG run) to the worker
that ran the step before it, when that worker is alive and has a free slot. Its caches
(pip wheels, downloaded inputs, warm imports) are likely still there. Otherwise the run
goes to its tier queue, so stickiness never delays anything.

The hint (which worker should preferably run an execution) is written when a retry or a DAG
node's successors are created; `route` reads it when their doorbells ring
(`scheduler_app.ringing.ring`) and turns it into that worker's own queue. The workers'
records come from the registry in Redis (`scheduler_app.fleet.records`): ringing never
imports the worker side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from django.conf import settings

from scheduler_app.capabilities import capability_of_queue
from scheduler_app.fleet.records import (
    STATE_ACTIVE,
    WorkerRecord,
    sticky_queue_name,
    worker_records,
)
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.tenant_pools import is_tenant_pool_queue

HINT_TTL_SECONDS = 6 * 3600
HITS, MISSES = "hit", "miss"


def hint_key(execution_id: str) -> str:
    return redis_key(f"sticky:{execution_id}")


def sticky_hint_set(*, execution_id: str, worker_id: str, ttl_seconds: float = 0) -> None:
    """Remember which worker should preferably run `execution_id` (set when it is created)."""
    if worker_id and settings.FLEET["STICKY_ROUTING"]:
        ttl = int(max(ttl_seconds, 0) + HINT_TTL_SECONDS)
        get_redis().set(hint_key(execution_id), worker_id, ex=ttl)


def sticky_hints_set(*, execution_ids: Sequence[str], worker_id: str) -> None:
    """`sticky_hint_set` for many executions in one round trip (a DAG node's successors)."""
    if not execution_ids or not worker_id or not settings.FLEET["STICKY_ROUTING"]:
        return
    pipe = get_redis().pipeline(transaction=False)
    for execution_id in execution_ids:
        pipe.set(hint_key(execution_id), worker_id, ex=HINT_TTL_SECONDS)
    pipe.execute()


def _usable(record: WorkerRecord | None, now: float) -> bool:
    return (
        record is not None
        and record.state == STATE_ACTIVE
        and not record.is_overdue(now)
        and record.free_slots > 0
    )


def preferred_queue(
    *, previous_worker_id: str, tier: str, workers: dict[str, WorkerRecord] | None = None
) -> str:
    """The queue for a follow-up of a step `previous_worker_id` ran: its own queue when it is
    alive with a free slot (and offers the capability the tier needs), else `tier`."""
    if not previous_worker_id or not settings.FLEET["STICKY_ROUTING"]:
        return tier
    if workers is None:
        workers = {record.hostname: record for record in worker_records()}
    record = workers.get(previous_worker_id)
    needed = capability_of_queue(tier)
    # A run that needs a capability sticks only to a worker that offers it.
    if _usable(record, time.time()) and (needed is None or needed in record.capabilities):
        return sticky_queue_name(previous_worker_id)
    return tier


def route(bells: Sequence[Doorbell]) -> list[Doorbell]:
    """Rewrite the queue of doorbells whose execution has a sticky hint. One MGET per batch;
    fires (which never have a hint) cost that one round trip and nothing else."""
    bells = list(bells)
    if not bells or not settings.FLEET["STICKY_ROUTING"]:
        return bells
    client = get_redis()
    hints = client.mget([hint_key(bell.execution_id) for bell in bells])
    if not any(hints):
        return bells
    workers = {record.hostname: record for record in worker_records()}
    routed: list[Doorbell] = []
    hits = misses = 0
    for bell, hint in zip(bells, hints, strict=True):
        if not hint or is_tenant_pool_queue(bell.queue):  # a hint may name a shared worker
            routed.append(bell)
            continue
        queue = preferred_queue(previous_worker_id=hint, tier=bell.queue, workers=workers)
        if queue != bell.queue:
            hits += 1
            # Count the slot now so one batch does not pile every retry on one worker.
            record = workers[hint]
            record.active_runs += 1
        else:
            misses += 1
        routed.append(replace(bell, queue=queue))
    pipe = client.pipeline(transaction=False)
    pipe.incrby(redis_key(f"sticky:stats:{HITS}"), hits)
    pipe.incrby(redis_key(f"sticky:stats:{MISSES}"), misses)
    pipe.execute()
    return routed


def sticky_stats() -> dict[str, int]:
    values = get_redis().mget([redis_key(f"sticky:stats:{k}") for k in (HITS, MISSES)])
    hits, misses = (int(v or 0) for v in values)
    return {"hits": hits, "misses": misses}
