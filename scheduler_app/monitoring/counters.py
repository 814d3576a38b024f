"""Run counters and histograms kept in Redis, so a scrape of any web process sees what the
worker processes counted (an in-process prometheus_client counter in a worker could not).

Written after the transaction that started or ended a run commits; a Redis outage loses
counts, never a run (PostgreSQL stays the record). One pipelined round trip per event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

# Upper bounds in seconds (Prometheus "le"); +Inf is implied.
LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS = (0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

RUNS_KEY = "metrics:runs"  # hash "tenant_id|tier|status" -> count
# hash "tier|le" -> observations in that bucket only (not cumulative: one write per
# observation, summed up when read), "tier|sum", "tier|count"
LAG_KEY = "metrics:lag:v2"
DURATION_KEY = "metrics:duration:v2"  # the same shape


def _observe(pipe, key: str, tier: str, value: float, buckets: tuple[float, ...]) -> None:
    bound = next((str(bound) for bound in buckets if value <= bound), "+Inf")
    pipe.hincrby(key, f"{tier}|{bound}", 1)
    pipe.hincrbyfloat(key, f"{tier}|sum", value)
    pipe.hincrby(key, f"{tier}|count", 1)


def record_run_started(*, tier: str, lag_seconds: float) -> None:
    try:
        pipe = get_redis().pipeline(transaction=False)
        record_run_started_into(pipe, tier=tier, lag_seconds=lag_seconds)
        pipe.execute()
    except redis.RedisError as error:
        logger.debug("could not count a started run: %s", error)


def record_run_started_into(pipe, *, tier: str, lag_seconds: float) -> None:
    """`record_run_started`, queued on a worker's pipeline."""
    _observe(pipe, redis_key(LAG_KEY), tier, max(lag_seconds, 0.0), LAG_BUCKETS)


def record_run_finished(
    *, tenant_id: str, tier: str, status: str, duration_seconds: float | None
) -> None:
    try:
        pipe = get_redis().pipeline(transaction=False)
        record_run_finished_into(
            pipe,
            tenant_id=tenant_id,
            tier=tier,
            status=status,
            duration_seconds=duration_seconds,
        )
        pipe.execute()
    except redis.RedisError as error:
        logger.debug("could not count a finished run: %s", error)


def record_run_finished_into(
    pipe, *, tenant_id: str, tier: str, status: str, duration_seconds: float | None
) -> None:
    """`record_run_finished`, queued on a worker's pipeline."""
    pipe.hincrby(redis_key(RUNS_KEY), f"{tenant_id}|{tier}|{status}", 1)
    if duration_seconds is not None:
        _observe(pipe, redis_key(DURATION_KEY), tier, max(duration_seconds, 0.0), DURATION_BUCKETS)


@dataclass(frozen=True)
class Histogram:
    buckets: list[tuple[str, float]]  # ("0.1", cumulative count) ... ("+Inf", count)
    total: float
    count: float


def read_runs() -> dict[tuple[str, str, str], int]:
    raw = get_redis().hgetall(redis_key(RUNS_KEY))
    runs: dict[tuple[str, str, str], int] = {}
    for field, value in raw.items():
        tenant_id, tier, status = field.split("|", 2)
        runs[(tenant_id, tier, status)] = int(value)
    return runs


def read_histograms(kind: str) -> dict[str, Histogram]:
    """kind is "lag" or "duration"; one histogram per tier."""
    key, bounds = (LAG_KEY, LAG_BUCKETS) if kind == "lag" else (DURATION_KEY, DURATION_BUCKETS)
    raw = get_redis().hgetall(redis_key(key))
    tiers = {field.split("|", 1)[0] for field in raw}
    histograms: dict[str, Histogram] = {}
    for tier in sorted(tiers):
        buckets: list[tuple[str, float]] = []
        cumulative = 0.0
        for bound in [*map(str, bounds), "+Inf"]:
            cumulative += float(raw.get(f"{tier}|{bound}", 0))
            buckets.append((bound, cumulative))
        histograms[tier] = Histogram(
            buckets=buckets,
            total=float(raw.get(f"{tier}|sum", 0)),
            count=float(raw.get(f"{tier}|count", 0)),
        )
    return histograms


# hash "tenant_id|budget" -> requests refused for that budget (log searches over the time or
# concurrency budget, payloads over their size cap or the tenant's bytes per hour)
REFUSALS_KEY = "metrics:budget-refusals"
# hash "tenant_id|kind|reason" -> notifications not sent (a tenant's mail over its rate)
NOTICES_DROPPED_KEY = "metrics:notifications-dropped"


# hash "tenant_id|tier|outcome" -> runs whose worker was lost while they ran ("requeued": the
# same attempt back in the queue; "failed": worker_lost, its requeues spent)
LOSSES_KEY = "metrics:runs-lost"


def record_run_lost(*, tenant_id: str, tier: str, outcome: str) -> None:
    try:
        get_redis().hincrby(redis_key(LOSSES_KEY), f"{tenant_id}|{tier}|{outcome}", 1)
    except redis.RedisError as error:
        logger.debug("could not count a lost run: %s", error)


def read_runs_lost() -> dict[tuple[str, str, str], int]:
    raw = get_redis().hgetall(redis_key(LOSSES_KEY))
    return {tuple(field.split("|", 2)): int(value) for field, value in raw.items()}  # type: ignore[misc]


def record_budget_refusal(*, tenant_id: str, budget: str) -> None:
    try:
        get_redis().hincrby(redis_key(REFUSALS_KEY), f"{tenant_id}|{budget}", 1)
    except redis.RedisError as error:
        logger.debug("could not count a budget refusal: %s", error)


def record_notification_dropped(*, tenant_id: str, kind: str, reason: str, count: int) -> None:
    try:
        get_redis().hincrby(redis_key(NOTICES_DROPPED_KEY), f"{tenant_id}|{kind}|{reason}", count)
    except redis.RedisError as error:
        logger.debug("could not count a dropped notification: %s", error)


def read_budget_refusals() -> dict[tuple[str, str], int]:
    raw = get_redis().hgetall(redis_key(REFUSALS_KEY))
    return {tuple(field.split("|", 1)): int(value) for field, value in raw.items()}  # type: ignore[misc]


def read_notifications_dropped() -> dict[tuple[str, str, str], int]:
    raw = get_redis().hgetall(redis_key(NOTICES_DROPPED_KEY))
    return {tuple(field.split("|", 2)): int(value) for field, value in raw.items()}  # type: ignore[misc]
