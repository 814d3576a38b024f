"""Signals to the worker that holds a run, over Redis keys: the cancel of an execution, the
abandonment of a claim. The server and a draining worker set them; the running worker polls
them (`workers.control`). Keys rather than pub/sub: a request made while the run is between
claim and its first poll (or while the worker reconnects to Redis) is not lost, and any
worker can see it.
"""

from __future__ import annotations

from scheduler_app.redis_client import get_redis, redis_key

CANCEL_TTL_SECONDS = 24 * 3600
ABANDON_TTL_SECONDS = 3600
PREEMPT_TTL_SECONDS = 3600


def cancel_key(execution_id: str) -> str:
    return redis_key(f"cancel:{execution_id}")


def abandon_key(claim_token: str) -> str:
    return redis_key(f"abandon:{claim_token}")


def preempt_key(worker_id: str) -> str:
    return redis_key(f"preempt:{worker_id}")


def preempt_request(*, worker_id: str) -> None:
    """Tell every run of this (draining) worker that it is being preempted: its handlers
    may checkpoint and stop before their runs are handed back."""
    get_redis().set(preempt_key(worker_id), "1", ex=PREEMPT_TTL_SECONDS)


def preempt_clear(*, worker_id: str) -> None:
    """A worker (re)joining the fleet under this name is not being preempted."""
    get_redis().delete(preempt_key(worker_id))


def cancel_request(*, execution_id: str) -> None:
    """Ask the worker running `execution_id` to kill it (within a poll interval)."""
    get_redis().set(cancel_key(execution_id), "1", ex=CANCEL_TTL_SECONDS)


def abandon_request(*, claim_tokens: list[str]) -> None:
    """Tell the holders of these claims (released by a draining worker) to stop now."""
    if claim_tokens:
        pipe = get_redis().pipeline(transaction=False)
        for token in claim_tokens:
            pipe.set(abandon_key(token), "1", ex=ABANDON_TTL_SECONDS)
        pipe.execute()
