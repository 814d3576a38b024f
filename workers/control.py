"""The running worker's side of the stop signals: has its run been cancelled, or its claim
abandoned? The requests are made by `scheduler_app.services.run_signals`.
"""

from __future__ import annotations

from scheduler_app.redis_client import get_redis
from scheduler_app.services.run_signals import abandon_key, cancel_key, preempt_key


def stop_requested(*, execution_id: str, claim_token: str) -> bool:
    """A cancel of the execution, or the abandonment of this claim of it."""
    return bool(get_redis().exists(cancel_key(execution_id), abandon_key(claim_token)))


def stop_requested_into(pipe, *, execution_id: str, claim_token: str) -> int:
    """Queue `stop_requested` on a pipeline; returns the index of its reply (truthy = stop)."""
    index = len(pipe)
    pipe.exists(cancel_key(execution_id), abandon_key(claim_token))
    return index


def preempted_into(pipe, *, worker_id: str) -> int:
    """Queue "is this worker being preempted?" on a pipeline; returns its reply's index."""
    index = len(pipe)
    pipe.exists(preempt_key(worker_id))
    return index
