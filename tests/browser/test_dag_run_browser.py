"""The DAG pages in a real browser: a run with a failed node is drawn with the right colours
(read back with getComputedStyle), the Gantt bars are there, a node that changes state in the
database changes colour without a reload, polling stops when the run ends, and the DAG's
pause/resume/trigger buttons work. Screenshots: tests/artifacts/dashboard-dag*.png."""

from __future__ import annotations

import pytest
from django.utils import timezone

from dags.models import Dag, DagNodeState, DagRun
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.browser.conftest import screenshot, sign_in, wait_for_js
from tests.dashboard.conftest import make_dag, make_dag_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("chromium")]

# The fills app.css gives each tone, as getComputedStyle reports them.
GREEN, YELLOW, RED = "rgb(76, 175, 80)", "rgb(255, 212, 59)", "rgb(201, 42, 42)"
GRAY, WHITE = "rgb(195, 200, 206)", "rgb(255, 255, 255)"

NODE_FILLS = """() => Object.fromEntries(
  [...document.querySelectorAll('#dag-graph g.dag-node')].map(g => [
    g.dataset.nodeId, getComputedStyle(g.querySelector('rect.node-box')).fill]))"""


def node_fill_is(node_id: str, fill: str) -> str:
    return (
        f"getComputedStyle(document.querySelector("
        f"'#dag-graph g.dag-node[data-node-id=\"{node_id}\"] rect.node-box')).fill === '{fill}'"
    )


@pytest.fixture
def fast_dashboard(settings):
    settings.MONITORING = {**settings.MONITORING, "DASHBOARD_POLL_SECONDS": 0.5}


@pytest.fixture
def failed_run(transactional_db):
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password="pw-123456")
    dag = make_dag(tenant)
    return dag, make_dag_run(dag)


def test_dag_run_graph_colours_gantt_and_live_updates(
    page, live_server, failed_run, fast_dashboard
):
    dag, run = failed_run
    sign_in(page, live_server, "/dashboard/dags")
    assert page.locator(f'#dags tr[data-dag-id="{dag.id}"] .run-chip.s-running').count() == 1
    screenshot(page, "dashboard-dags")

    page.click(f'#dags tr[data-dag-id="{dag.id}"] .run-chip')
    page.wait_for_selector("#dag-graph")
    assert page.evaluate(NODE_FILLS) == {
        "a": GREEN,
        "b": RED,  # failed
        "c": GRAY,  # upstream_failed: did not run because b failed
        "d": GREEN,
        "e": YELLOW,  # running
        "f": WHITE,  # waiting for e
        "g": GRAY,  # skipped
    }
    assert page.locator("#dag-graph path.dag-edge").count() == 4
    bars = page.locator("#gantt .gantt-bar")
    assert bars.count() == 4  # the nodes that started: a, b, d, e
    assert all(
        box["width"] > 0
        for box in bars.evaluate_all("bars => bars.map(b => b.getBoundingClientRect().toJSON())")
    )
    assert page.locator('#gantt .gantt-row[data-node-id="b"] .gantt-bar.tone-failed').count() == 1
    screenshot(page, "dashboard-dag-run")

    # Live: e succeeds and f starts, in the database only; the page follows without a reload.
    now = timezone.now()
    DagNodeState.objects.filter(run=run, node_id="e").update(status="success", completed_at=now)
    DagNodeState.objects.filter(run=run, node_id="f").update(
        status="running", started_at=now, attempts=1
    )
    wait_for_js(page, node_fill_is("e", GREEN), timeout=15000)
    wait_for_js(page, node_fill_is("f", YELLOW), timeout=15000)
    assert page.locator("#gantt .gantt-bar").count() == 5
    assert page.get_attribute("#live", "data-polling") is None

    # The run ends: the page shows it and stops polling.
    DagNodeState.objects.filter(run=run, node_id="f").update(
        status="success", completed_at=timezone.now()
    )
    DagRun.platform.filter(id=run.id).update(
        status="failed", completed_at=timezone.now(), remaining_nodes=0
    )
    page.wait_for_selector('#live[data-polling="stopped"]', timeout=15000)
    assert page.evaluate(NODE_FILLS)["f"] == GREEN
    assert "no more updates" in page.inner_text("#updated-at")
    refreshes = page.get_attribute("#live", "data-refreshes")
    page.wait_for_timeout(1500)  # three poll periods: none may happen
    assert page.get_attribute("#live", "data-refreshes") == refreshes
    screenshot(page, "dashboard-dag-run-finished")

    # A node links to its execution, which links back to the run.
    page.click('#dag-graph g.dag-node[data-node-id="b"] a')
    page.wait_for_selector("#dag-node-link")
    page.click("#dag-node-link a")
    page.wait_for_selector("#dag-graph")
    assert f"/dashboard/dags/{dag.id}/runs/{run.id}" in page.url


def test_dag_pause_resume_and_trigger_buttons(page, live_server, failed_run):
    dag, existing = failed_run
    sign_in(page, live_server, f"/dashboard/dags/{dag.id}")
    screenshot(page, "dashboard-dag")
    page.click("#btn-dag-pause")
    page.wait_for_selector("#btn-dag-resume")
    assert "paused" in page.inner_text("#dag-state")
    assert Dag.platform.get(id=dag.id).paused is True
    page.click("#btn-dag-resume")
    page.wait_for_selector("#btn-dag-pause")
    assert Dag.platform.get(id=dag.id).paused is False

    page.click("#btn-dag-trigger")
    page.wait_for_selector("#dag-graph")
    assert "Triggered etl-pipeline" in page.inner_text(".messages")
    triggered = DagRun.platform.filter(dag=dag).exclude(id=existing.id).get()
    assert str(triggered.id) in page.url
    # The roots were dispatched (queued: white with a dashed outline), the rest wait.
    states = page.evaluate(
        "() => Object.fromEntries([...document.querySelectorAll('#dag-graph g.dag-node')]"
        ".map(g => [g.dataset.nodeId, g.dataset.state]))"
    )
    assert {states[n] for n in ("a", "d", "e")} <= {"queued", "running", "success"}
    assert states["c"] == "waiting"


def test_other_tenants_run_is_not_found_in_the_browser(page, live_server, failed_run):
    other, _ = tenant_create_with_admin(
        slug="globex", username="globex-admin", password="pw-123456"
    )
    dag = make_dag(other)
    run = make_dag_run(dag)
    sign_in(page, live_server)
    assert page.goto(f"{live_server.url}/dashboard/dags/{dag.id}/runs/{run.id}").status == 404
