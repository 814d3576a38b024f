"""Hourly/daily per-task statistics, maintained incrementally, and their selectors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from data_lifecycle.models import TaskStats
from data_lifecycle.selectors import stats_overview, task_stats
from data_lifecycle.services.stats_refresh import task_stats_refresh
from tests.data_lifecycle.helpers import make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db
NOW = datetime(2030, 5, 10, 12, 30, tzinfo=UTC)


def test_hourly_and_daily_buckets_count_by_status_with_percentiles(tenant, tenant_factory):
    task = make_task(tenant)
    hour = datetime(2030, 5, 10, 10, tzinfo=UTC)
    make_runs(task, [hour + timedelta(minutes=i) for i in range(10)], duration=1.0, lag=0.2)
    make_runs(
        task, [hour + timedelta(minutes=30 + i) for i in range(2)], status="failed", duration=9.0
    )
    make_runs(task, [hour + timedelta(hours=1, minutes=1)], duration=3.0)
    other, _ = tenant_factory("other-co")
    make_runs(make_task(other), [hour], duration=100.0)

    task_stats_refresh(now=NOW, lookback_hours=6)

    hours = task_stats(tenant=tenant, since=hour, until=NOW, bucket="hour")
    assert [(h["bucket_start"], h["total"]) for h in hours] == [
        (hour, 12),
        (hour + timedelta(hours=1), 1),
    ]
    first = hours[0]
    assert first["by_status"] == {"success": 10, "failed": 2}
    # Read from the bucket's histogram: within its 1% (data_lifecycle.latency_sketch).
    assert first["duration_p50"] == pytest.approx(1.0, rel=0.01)
    assert first["duration_p99"] == pytest.approx(9.0, rel=0.01)
    assert first["lag_p50"] == pytest.approx(0.2, abs=0.01)
    assert first["lag_p95"] == pytest.approx(0.5, abs=0.01)
    (day,) = task_stats(tenant=tenant, since=hour - timedelta(days=1), until=NOW, bucket="day")
    assert day["total"] == 13
    overview = stats_overview(tenant=tenant, since=hour, until=NOW)
    assert overview["total"] == 13 and overview["by_status"]["failed"] == 2
    assert [b["total"] for b in overview["series"]] == [12, 1]
    assert overview["worst_duration_p95"] < 100  # the other tenant's run is not ours


def test_refresh_only_rewrites_open_buckets(tenant):
    task = make_task(tenant)
    old_hour = datetime(2030, 5, 9, 1, tzinfo=UTC)
    make_runs(task, [old_hour])
    task_stats_refresh(now=old_hour + timedelta(minutes=30), lookback_hours=2)
    old = TaskStats.platform.get(bucket="hour", bucket_start=old_hour, task_id=task.id)
    # A day later: the old hour is final and stays as written, new runs are counted.
    make_runs(task, [NOW - timedelta(minutes=5)])
    task_stats_refresh(now=NOW, lookback_hours=2)
    assert TaskStats.platform.get(pk=old.pk).refreshed_at == old.refreshed_at
    assert TaskStats.platform.filter(
        bucket="hour", bucket_start=datetime(2030, 5, 10, 12, tzinfo=UTC)
    ).exists()
