"""The task and DAG pages draw the week's latency trend from the stats buckets: the chart's
points are the hand-counted runs' per-hour p50/p95, the totals table says the week's
percentiles and success, and another tenant's page shows none of it."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from data_lifecycle.services.stats_refresh import task_stats_refresh
from tests.dashboard.conftest import make_dag
from tests.data_lifecycle.helpers import make_dag_runs, make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def chart_data(page: str) -> dict:
    raw = page.split('<script id="chart-data" type="application/json">')[1].split("</script>")[0]
    return json.loads(raw)


def shown(text: str, quantile: str) -> float:
    """`p95 40.05 s` -> 40.05, `p50 249 ms` -> 0.249."""
    number, unit = re.search(rf"{quantile} ([0-9.]+) (ms|s)", text).groups()
    return float(number) / (1000 if unit == "ms" else 1)


def hour_ago():
    return timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


def test_the_task_page_draws_the_hourly_percentiles_and_says_the_totals(signed_in, tenant):
    task = make_task(tenant, name="measured", schedule={"type": "manual"})
    at = hour_ago()
    make_runs(task, [at + timedelta(seconds=i) for i in range(9)], duration=2.0, lag=0.25)
    make_runs(task, [at + timedelta(seconds=20)], status="failed", duration=40.0, lag=5.0)
    task_stats_refresh(lookback_hours=3)

    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()

    assert 'data-chart="quantiles" data-series="latency"' in page
    points = chart_data(page)["latency"]
    assert len(points) in (7 * 24, 7 * 24 + 1)
    (busy,) = [p for p in points if p["count"]]
    assert busy["count"] == 10
    assert busy["duration_p50"] == pytest.approx(2.0, rel=0.01)
    assert busy["duration_p95"] == pytest.approx(40.0, rel=0.01)
    assert busy["lag_p50"] == pytest.approx(0.25, rel=0.01)
    totals = page.split('id="latency-totals"')[1].split("</table>")[0]
    assert "10 · 90.0% succeeded" in totals
    # As a person reads them: the bins' values, within 1% of the runs'.
    duration = totals.split("<th>duration</th>")[1]
    assert shown(duration, "p50") == pytest.approx(2.0, rel=0.01)
    assert shown(duration, "p95") == pytest.approx(40.0, rel=0.01)
    lag = totals.split("<th>schedule lag</th>")[1]
    assert shown(lag, "p50") == pytest.approx(0.25, rel=0.01)
    assert shown(lag, "p99") == pytest.approx(5.0, rel=0.01)


def test_the_dag_page_draws_its_runs_trend(signed_in, tenant):
    dag = make_dag(tenant)
    at = hour_ago()
    make_dag_runs(dag, [at + timedelta(seconds=i) for i in range(4)], duration=30.0, lag=1.0)
    task_stats_refresh(lookback_hours=3)

    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()

    (busy,) = [p for p in chart_data(page)["latency"] if p["count"]]
    assert busy["count"] == 4 and busy["duration_p95"] == pytest.approx(30.0, rel=0.01)
    assert "4 · 100.0% succeeded" in page.split('id="latency-totals"')[1]


def test_another_tenants_pages_show_none_of_it(signed_in, tenant, tenant_factory):
    task = make_task(tenant, name="measured", schedule={"type": "manual"})
    make_runs(task, [hour_ago()], duration=7.0)
    task_stats_refresh(lookback_hours=3)
    other, other_admin = tenant_factory("bravo")
    their_task = make_task(other, name="theirs", schedule={"type": "manual"})
    attacker = Client()
    attacker.force_login(other_admin)

    assert attacker.get(f"/dashboard/tasks/{task.id}").status_code == 404
    page = attacker.get(f"/dashboard/tasks/{their_task.id}").content.decode()
    assert all(not p["count"] for p in chart_data(page)["latency"])
    assert "0 · – succeeded" in page.split('id="latency-totals"')[1]
