"""Per-task and per-DAG latency and success over a window, against hand-counted runs:
the runs are written with known durations, lags and statuses, the buckets refreshed the way
the product does (`task_stats_refresh`), and the window's counts compared exactly, its
p50/p95/p99 within the sketch's 1%."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from data_lifecycle.latency_sketch import RELATIVE_ACCURACY
from data_lifecycle.models import DagStats
from data_lifecycle.selectors.latency import dag_latency, task_latency
from data_lifecycle.services.stats_refresh import task_stats_refresh
from tests.data_lifecycle.helpers import make_dag_runs, make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db
NOW = datetime(2030, 5, 10, 12, 30, tzinfo=UTC)
PIPELINE = {
    "dag": "nightly",
    "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
}


def nearest_rank(values: list[float], q: float) -> float:
    """The smallest value with at least q * n values at or under it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def write_task_runs(task) -> tuple[list[float], list[float], dict[str, int]]:
    """100 runs over two days: durations 1..100 s, lags 0.01..1.00 s; every 10th fails,
    every 25th times out (the 50th and 100th fail: 10 failed, 2 timed out, 88 success)."""
    start = datetime(2030, 5, 9, 8, tzinfo=UTC)
    durations, lags, counts = [], [], {"success": 0, "failed": 0, "timed_out": 0}
    for i in range(1, 101):
        status = "failed" if i % 10 == 0 else "timed_out" if i % 25 == 0 else "success"
        when = start + timedelta(minutes=17 * i)  # 28 h: hours of two days
        make_runs(task, [when], status=status, duration=float(i), lag=i / 100)
        durations.append(float(i))
        lags.append(i / 100)
        counts[status] += 1
    return durations, lags, counts


def assert_quantiles(found: dict, values: list[float]) -> None:
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        assert found[name] == pytest.approx(nearest_rank(values, q), rel=RELATIVE_ACCURACY)


@pytest.mark.parametrize("bucket", ["hour", "day"])
def test_task_window_matches_the_hand_counted_runs(tenant, bucket):
    task = make_task(tenant)
    durations, lags, counts = write_task_runs(task)
    assert counts == {"success": 88, "failed": 10, "timed_out": 2}
    task_stats_refresh(now=NOW, lookback_hours=48)

    stats = task_latency(
        tenant=tenant, task_id=task.id, window=timedelta(days=7), bucket=bucket, now=NOW
    )

    totals = stats["totals"]
    assert totals["count"] == 100
    assert totals["by_status"] == counts
    assert totals["success_rate"] == 0.88
    assert_quantiles(totals["duration"], durations)
    assert_quantiles(totals["lag"], lags)
    series = stats["series"]
    assert len(series) == (7 * 24 + 1 if bucket == "hour" else 8)
    assert sum(point["count"] for point in series) == 100
    assert all(point["duration"]["p50"] is None for point in series if not point["count"])


def test_one_hour_of_the_series_is_that_hours_runs(tenant):
    task = make_task(tenant)
    hour = datetime(2030, 5, 10, 9, tzinfo=UTC)
    make_runs(task, [hour + timedelta(minutes=m) for m in range(4)], duration=3.0, lag=0.2)
    make_runs(task, [hour + timedelta(minutes=50)], status="failed", duration=30.0, lag=4.0)
    task_stats_refresh(now=NOW, lookback_hours=6)

    stats = task_latency(
        tenant=tenant, task_id=task.id, window=timedelta(hours=6), bucket="hour", now=NOW
    )

    (point,) = [p for p in stats["series"] if p["start"] == hour]
    assert point["count"] == 5 and point["by_status"] == {"success": 4, "failed": 1}
    assert point["success_rate"] == 0.8
    assert point["duration"]["p50"] == pytest.approx(3.0, rel=RELATIVE_ACCURACY)
    assert point["duration"]["p99"] == pytest.approx(30.0, rel=RELATIVE_ACCURACY)
    assert point["lag"]["p95"] == pytest.approx(4.0, rel=RELATIVE_ACCURACY)
    assert stats["totals"]["count"] == 5


def test_windows_read_only_the_tenants_own_task(tenant, tenant_factory):
    task = make_task(tenant)
    make_runs(task, [NOW - timedelta(hours=2)], duration=1.0)
    other, _ = tenant_factory("other-co")
    # The attacker's tenant asks for our task's id: its rows are filtered by its tenant.
    make_runs(make_task(other), [NOW - timedelta(hours=2)], duration=500.0)
    task_stats_refresh(now=NOW, lookback_hours=6)

    seen_by_other = task_latency(
        tenant=other, task_id=task.id, window=timedelta(days=1), bucket="hour", now=NOW
    )
    assert seen_by_other["totals"]["count"] == 0
    ours = task_latency(
        tenant=tenant, task_id=task.id, window=timedelta(days=1), bucket="hour", now=NOW
    )
    assert ours["totals"]["count"] == 1
    assert ours["totals"]["duration"]["p99"] == pytest.approx(1.0, rel=RELATIVE_ACCURACY)


def test_dag_window_matches_the_hand_counted_runs(tenant):
    from dags.services.definitions import dag_create

    dag = dag_create(tenant=tenant, raw=PIPELINE)
    start = datetime(2030, 5, 9, 20, tzinfo=UTC)
    durations, lags = [], []
    for i in range(1, 41):
        status = "failed" if i % 8 == 0 else "partially_completed" if i == 13 else "success"
        make_dag_runs(
            dag, [start + timedelta(minutes=20 * i)], status=status, duration=10.0 * i, lag=i
        )
        durations.append(10.0 * i)
        lags.append(float(i))
    task_stats_refresh(now=NOW, lookback_hours=24)

    stats = dag_latency(
        tenant=tenant, dag_id=dag.id, window=timedelta(days=2), bucket="hour", now=NOW
    )

    totals = stats["totals"]
    assert totals["by_status"] == {"success": 34, "failed": 5, "partially_completed": 1}
    assert totals["count"] == 40
    assert totals["success_rate"] == 0.85
    assert_quantiles(totals["duration"], durations)
    assert_quantiles(totals["lag"], lags)
    assert DagStats.platform.filter(dag_id=dag.id, bucket="day").count() == 2
