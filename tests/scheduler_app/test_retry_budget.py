"""The retry budget against real Redis: over budget is deferred, never dropped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.services.retry_budget import (
    retry_budget_admit,
    retry_budget_note_execution,
    retry_budget_usage,
)

# A minute of its own (counters are per minute), mid-minute so +20 s stays inside it.
NOW = datetime(2031, 5, 4, 12, 30, 10, tzinfo=UTC)


BUDGET = {**settings.FLEET, "RETRY_BUDGET_RATIO": 0.2, "RETRY_BUDGET_MIN_PER_MINUTE": 5}


@pytest.fixture(autouse=True)
def _clean(redis_client):
    from scheduler_app.redis_client import redis_key

    for key in redis_client.scan_iter(redis_key("budget:*")):
        redis_client.delete(key)


@override_settings(FLEET=BUDGET)
def test_retries_over_20_percent_of_executions_are_deferred_to_the_next_minute_not_dropped():
    for _ in range(100):
        retry_budget_note_execution(at=NOW)
    due = [NOW + timedelta(seconds=1, milliseconds=i) for i in range(30)]
    admitted = [retry_budget_admit(due_at=at, now=NOW) for at in due]
    on_time = [a for a, d in zip(admitted, due, strict=True) if a == d]
    deferred = [a for a, d in zip(admitted, due, strict=True) if a != d]
    assert len(on_time) == 20  # 20% of 100
    assert len(deferred) == 10
    assert all(a - d == timedelta(minutes=1) for a, d in zip(admitted, due, strict=True) if a != d)
    assert len(set(admitted)) == 30  # distinct times: UNIQUE(task, scheduled_at, attempt)
    usage = retry_budget_usage(now=NOW)
    assert usage["retries_this_minute"] == 20 and usage["retry_allowance_this_minute"] == 20


@override_settings(FLEET=BUDGET)
def test_a_quiet_system_still_gets_the_minimum_and_a_storm_spreads_over_minutes():
    due = [NOW + timedelta(milliseconds=i) for i in range(12)]
    admitted = [retry_budget_admit(due_at=at, now=NOW) for at in due]
    shifts = sorted(round((a - d).total_seconds() / 60) for a, d in zip(admitted, due, strict=True))
    assert shifts == [0] * 5 + [1] * 5 + [2] * 2
