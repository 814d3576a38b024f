"""Steering a running execution from outside its worker: cancel requests over Redis.

A key rather than pub/sub: a request made while the run is between claim and its first
poll (or while the worker reconnects to Redis) is not lost, and any worker can see it.
"""

from __future__ import annotations

import logging

from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

CANCEL_TTL_SECONDS = 24 * 3600


def _cancel_key(execution_id: str) -> str:
    return redis_key(f"cancel:{execution_id}")


def cancel_request(*, execution_id: str) -> None:
    get_redis().set(_cancel_key(execution_id), "1", ex=CANCEL_TTL_SECONDS)


def _abandon_key(claim_token: str) -> str:
    return redis_key(f"abandon:{claim_token}")


def abandon_request(*, claim_tokens: list[str]) -> None:
    """Tell the holders of these claims (released by a draining worker) to stop now."""
    if claim_tokens:
        pipe = get_redis().pipeline(transaction=False)
        for token in claim_tokens:
            pipe.set(_abandon_key(token), "1", ex=3600)
        pipe.execute()


def stop_requested(*, execution_id: str, claim_token: str) -> bool:
    """A cancel of the execution, or the abandonment of this claim of it."""
    return bool(get_redis().exists(_cancel_key(execution_id), _abandon_key(claim_token)))


def stop_requested_into(pipe, *, execution_id: str, claim_token: str) -> int:
    """Queue `stop_requested` on a pipeline; returns the index of its reply (truthy = stop)."""
    index = len(pipe)
    pipe.exists(_cancel_key(execution_id), _abandon_key(claim_token))
    return index
