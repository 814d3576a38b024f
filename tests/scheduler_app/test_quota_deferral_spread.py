"""Runs deferred together for the concurrency limit do not come back together."""

from __future__ import annotations

from datetime import timedelta

from scheduler_app.services.quotas import concurrency_deferral_delay


def test_concurrency_deferrals_spread_around_the_configured_delay(settings):
    settings.QUOTA_DEFER_SECONDS = 4.0
    delays = [concurrency_deferral_delay() for _ in range(200)]
    assert all(timedelta(seconds=2) <= delay <= timedelta(seconds=6) for delay in delays)
    # Racing claims must not be handed the same delay (they would race again).
    assert len(set(delays)) > 190
