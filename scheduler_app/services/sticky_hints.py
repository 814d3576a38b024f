"""Sticky routing hints: which worker should preferably run an execution (the worker that ran
the step before it). Written when a retry or a DAG node's successors are created; read by
`workers.routing.route` when their doorbells ring, which turns a hint into that worker's own
queue when the worker is alive with a free slot.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

HINT_TTL_SECONDS = 6 * 3600


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
