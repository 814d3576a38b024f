"""`GET tasks/{id}/stats` and `GET dags/{id}/stats`: hand-counted runs through the real DRF
stack, the window and bucket validated (a 400 naming the field), another tenant's id a 404
that shows nothing of it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from data_lifecycle.services.stats_refresh import task_stats_refresh
from tests.api_clients import member_client
from tests.data_lifecycle.helpers import make_dag_runs, make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db
PIPELINE = {
    "dag": "nightly",
    "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
}


def hand_counted_task(tenant):
    """Two hours ago: 8 runs of 2 s (lag 0.1 s), 2 failed runs of 20 s (lag 3 s)."""
    task = make_task(tenant, name="hand-counted", schedule={"type": "manual"})
    # Whole within one hour bucket, whatever the minute now.
    at = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    make_runs(task, [at + timedelta(seconds=i) for i in range(8)], duration=2.0, lag=0.1)
    make_runs(
        task,
        [at + timedelta(seconds=9), at + timedelta(seconds=10)],
        status="failed",
        duration=20.0,
        lag=3.0,
    )
    task_stats_refresh(lookback_hours=6)
    return task


def test_task_stats_answer_the_hand_counted_runs(tenant, api):
    task = hand_counted_task(tenant)

    response = api.get(f"/api/v1/tasks/{task.id}/stats", {"window": "1d", "bucket": "hour"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["window"] == "1d" and body["bucket"] == "hour"
    totals = body["totals"]
    assert totals["count"] == 10
    assert totals["by_status"] == {"success": 8, "failed": 2}
    assert totals["success_rate"] == 0.8
    assert totals["duration"]["p50"] == pytest.approx(2.0, rel=0.01)
    assert totals["duration"]["p95"] == pytest.approx(20.0, rel=0.01)
    assert totals["lag"]["p50"] == pytest.approx(0.1, rel=0.01)
    assert totals["lag"]["p99"] == pytest.approx(3.0, rel=0.01)
    assert len(body["series"]) in (24, 25)  # the hours the window overlaps
    (busy,) = [point for point in body["series"] if point["count"]]
    assert busy["count"] == 10 and busy["duration"]["p95"] == pytest.approx(20.0, rel=0.01)


def test_a_viewer_reads_them_and_the_default_is_a_week_by_the_day(tenant):
    task = hand_counted_task(tenant)
    viewer, _ = member_client(tenant, "viewer")

    body = viewer.get(f"/api/v1/tasks/{task.id}/stats").json()

    assert body["window"] == "7d" and body["bucket"] == "day"
    assert body["totals"]["count"] == 10
    assert len(body["series"]) in (7, 8)


@pytest.mark.parametrize(
    "query, field",
    [
        ({"window": "week"}, "window"),
        ({"window": "0d"}, "window"),
        ({"window": "7d", "bucket": "minute"}, "bucket"),
        ({"window": "15d", "bucket": "hour"}, "window"),
        ({"window": "401d", "bucket": "day"}, "window"),
    ],
)
def test_a_bad_window_or_bucket_is_a_400_naming_it(tenant, api, query, field):
    task = make_task(tenant, name="t", schedule={"type": "manual"})

    response = api.get(f"/api/v1/tasks/{task.id}/stats", query)

    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_another_tenants_task_and_dag_are_404s_that_show_nothing(tenant, api, tenant_factory):
    other, _ = tenant_factory("bravo")
    their_task = hand_counted_task(other)
    from dags.services.definitions import dag_create

    their_dag = dag_create(tenant=other, raw=PIPELINE)
    make_dag_runs(their_dag, [timezone.now() - timedelta(hours=1)])
    task_stats_refresh(lookback_hours=6)

    for url in (f"/api/v1/tasks/{their_task.id}/stats", f"/api/v1/dags/{their_dag.id}/stats"):
        response = api.get(url, {"window": "1d"})
        assert response.status_code == 404, response.content
        text = response.content.decode()
        assert "hand-counted" not in text and "nightly" not in text and "count" not in text


def test_dag_stats_answer_the_hand_counted_runs(tenant, api):
    from dags.services.definitions import dag_create

    dag = dag_create(tenant=tenant, raw=PIPELINE)
    at = timezone.now() - timedelta(hours=3)
    make_dag_runs(dag, [at + timedelta(seconds=i) for i in range(3)], duration=60.0, lag=1.0)
    make_dag_runs(dag, [at + timedelta(seconds=5)], status="failed", duration=600.0, lag=1.0)
    task_stats_refresh(lookback_hours=6)

    response = api.get(f"/api/v1/dags/{dag.id}/stats", {"window": "12h"})

    assert response.status_code == 200, response.content
    totals = response.json()["totals"]
    assert totals["by_status"] == {"success": 3, "failed": 1}
    assert totals["success_rate"] == 0.75
    assert totals["duration"]["p50"] == pytest.approx(60.0, rel=0.01)
    assert totals["duration"]["p99"] == pytest.approx(600.0, rel=0.01)
    assert response.json()["bucket"] == "hour"
