"""Retry budget: retries may be at most a share (default 20%) of the executions started per
minute, so a failing dependency cannot turn into a retry storm that starves fresh runs.

A retry over budget is deferred to the first minute with room, never dropped: the next
attempt row is created as usual, only its `scheduled_at` moves. Counters are per-minute
Redis keys; INCR-then-check-then-DECR may under-admit under a race, never over-admit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

COUNTER_TTL_SECONDS = 3 * 3600
# How far ahead a retry may be pushed looking for room (then it goes there regardless).
MAX_DEFER_MINUTES = 120


def _minute(at: datetime) -> int:
    return int(at.timestamp() // 60)


def _executions_key(minute: int) -> str:
    return redis_key(f"budget:executions:{minute}")


def _retries_key(minute: int) -> str:
    return redis_key(f"budget:retries:{minute}")


def retry_budget_note_execution(*, at: datetime) -> None:
    """Count one started execution (every attempt counts, retries included)."""
    pipe = get_redis().pipeline(transaction=False)
    retry_budget_note_execution_into(pipe, at=at)
    pipe.execute()


def retry_budget_note_execution_into(pipe, *, at: datetime) -> None:
    """`retry_budget_note_execution`, queued on a worker's pipeline."""
    key = _executions_key(_minute(at))
    pipe.incr(key)
    pipe.expire(key, COUNTER_TTL_SECONDS)


def retry_budget_unnote_execution_into(pipe, *, at: datetime) -> None:
    """Undo `retry_budget_note_execution_into` (a claimed run that did not run after all)."""
    pipe.decr(_executions_key(_minute(at)))


def retry_budget_allowance(*, minute: int, current_minute: int) -> int:
    """Retries allowed in `minute`: the ratio of the executions rate, with a floor. A future
    minute uses the best rate seen now (this minute or the previous one)."""
    config = settings.FLEET
    client = get_redis()
    reference = min(minute, current_minute)
    started = client.mget([_executions_key(reference), _executions_key(reference - 1)])
    rate = max(int(v or 0) for v in started)
    return max(config["RETRY_BUDGET_MIN_PER_MINUTE"], int(rate * config["RETRY_BUDGET_RATIO"]))


def retry_budget_admit(*, due_at: datetime, now: datetime) -> datetime:
    """The time a retry due at `due_at` may run: `due_at` when the budget of its minute has
    room, else the start of the first later minute that has."""
    client = get_redis()
    current = _minute(now)
    first = _minute(due_at)
    for minute in range(first, first + MAX_DEFER_MINUTES):
        allowance = retry_budget_allowance(minute=minute, current_minute=current)
        key = _retries_key(minute)
        pipe = client.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, COUNTER_TTL_SECONDS)
        taken = pipe.execute()[0]
        if taken <= allowance:
            # Same second-of-minute, whole minutes later: deferred retries stay spread out
            # (and distinct, which UNIQUE(task, scheduled_at, attempt) requires).
            return due_at + timedelta(minutes=minute - first)
        client.decr(key)
    return due_at + timedelta(minutes=MAX_DEFER_MINUTES)


def retry_budget_usage(*, now: datetime) -> dict[str, int]:
    minute = _minute(now)
    client = get_redis()
    executions, retries = client.mget([_executions_key(minute), _retries_key(minute)])
    return {
        "executions_this_minute": int(executions or 0),
        "retries_this_minute": int(retries or 0),
        "retry_allowance_this_minute": retry_budget_allowance(minute=minute, current_minute=minute),
    }
