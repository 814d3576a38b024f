"""The latency trend in a real browser: on a task's page and a DAG's, the week's chart is
drawn (p50 and p95 lines of duration and lag, a dot per busy hour, each saying its value),
the totals read as a person reads them, and the chart is still there after a live update."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from data_lifecycle.services.stats_refresh import task_stats_refresh
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.browser.conftest import screenshot, sign_in, wait_for_js
from tests.dashboard.conftest import make_dag
from tests.data_lifecycle.helpers import make_dag_runs, make_runs
from tests.factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("chromium")]


@pytest.fixture
def measured(transactional_db, settings):
    settings.MONITORING = {**settings.MONITORING, "DASHBOARD_POLL_SECONDS": 0.5}
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    task = make_task(tenant, name="measured", schedule={"type": "manual"})
    dag = make_dag(tenant)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago, duration in ((3, 1.5), (2, 3.0), (1, 6.0)):
        at = hour - timedelta(hours=hours_ago)
        make_runs(task, [at + timedelta(seconds=i) for i in range(5)], duration=duration, lag=0.2)
        make_dag_runs(dag, [at + timedelta(seconds=i) for i in range(2)], duration=10 * duration)
    task_stats_refresh(lookback_hours=6)
    return task, dag


def chart_checks(page) -> None:
    chart = "#latency-chart svg"
    page.wait_for_selector(f"{chart} polyline.line-duration_p50")
    for key in ("duration_p50", "duration_p95", "lag_p50", "lag_p95"):
        assert page.locator(f"{chart} circle.dot-{key}").count() == 3, key
        assert page.locator(f"{chart} polyline.line-{key}").count() == 1, key
    assert page.get_attribute(f"{chart} polyline.line-duration_p95", "stroke-dasharray")
    assert page.locator(f"{chart} text.axis-time").count() == 2  # the week's first and last hour


def test_task_and_dag_pages_draw_the_week_of_latency(page, live_server, measured):
    task, dag = measured
    sign_in(page, live_server)

    page.goto(f"{live_server.url}/dashboard/tasks/{task.id}")
    wait_for_js(page, "document.readyState === 'complete'")
    chart_checks(page)
    titles = page.locator("#latency-chart svg circle.dot-duration_p50 title").all_text_contents()
    shown = [float(t.split(" duration p50 ")[1].split(" s")[0]) for t in titles]
    assert shown == [pytest.approx(s, rel=0.01) for s in (1.5, 3.0, 6.0)]
    assert all("(5 runs)" in t for t in titles)
    totals = page.locator("#latency-totals").inner_text()
    assert "15 · 100.0% succeeded" in totals
    p95 = float(totals.split("duration")[1].split("p95 ")[1].split(" s")[0])
    assert p95 == pytest.approx(6.0, rel=0.01)
    screenshot(page, "dashboard-task-latency")
    # A live update redraws it (the poll swaps the fragment in every half second).
    refreshes = int(page.get_attribute("#live", "data-refreshes") or 0)
    wait_for_js(page, f"Number(document.querySelector('#live').dataset.refreshes) > {refreshes}")
    chart_checks(page)

    page.goto(f"{live_server.url}/dashboard/dags/{dag.id}")
    wait_for_js(page, "document.readyState === 'complete'")
    chart_checks(page)
    assert "6 · 100.0% succeeded" in page.locator("#latency-totals").inner_text()
    screenshot(page, "dashboard-dag-latency")
