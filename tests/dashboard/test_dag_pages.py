"""DAG pages through Django's test client: the list, a DAG with its runs and buttons, a run
drawn as a graph and a Gantt chart; tenant walls and roles as on every dashboard page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from dags.models import Dag, DagNodeState, DagRun
from scheduler_app.choices import Role
from scheduler_app.models import TaskExecution, TenantMembership
from tests.dashboard.conftest import ENDED_RUN_STATES, make_dag, make_dag_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def dag_run(tenant):
    dag = make_dag(tenant)
    return dag, make_dag_run(dag)


def _node_tones(html: str) -> dict[str, tuple[str, str]]:
    """node id -> (data-state, data-tone) as drawn in the graph."""
    return {
        node: (state, tone)
        for node, state, tone in re.findall(
            r'<g class="dag-node[^"]*" data-node-id="([^"]+)" data-state="([^"]+)" '
            r'data-tone="([^"]+)"',
            html,
        )
    }


@pytest.mark.parametrize("fragment", ["", "?fragment=1"])
def test_dag_pages_render(signed_in, dag_run, fragment):
    dag, run = dag_run
    for url in (
        "/dashboard/dags",
        f"/dashboard/dags/{dag.id}",
        f"/dashboard/dags/{dag.id}/runs/{run.id}",
    ):
        response = signed_in.get(url + fragment)
        assert response.status_code == 200, (url, response.content[:500])


def test_nav_links_the_dag_list_which_shows_schedule_state_and_last_runs(signed_in, dag_run):
    dag, run = dag_run
    assert 'href="/dashboard/dags"' in signed_in.get("/dashboard/").content.decode()
    page = signed_in.get("/dashboard/dags").content.decode()
    assert "etl-pipeline" in page and "0 3 * * *" in page and "active" in page
    assert f'href="/dashboard/dags/{dag.id}/runs/{run.id}"' in page
    assert 'data-status="running"' in page


def test_dag_page_lists_its_runs_newest_first(signed_in, dag_run):
    dag, first = dag_run
    second = make_dag_run(dag, started_seconds_ago=5)
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert page.index(str(second.id)) < page.index(str(first.id))
    assert "btn-dag-trigger" in page and "btn-dag-pause" in page


def test_run_page_draws_every_node_with_its_state_colour(signed_in, dag_run):
    dag, run = dag_run
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert _node_tones(page) == {
        "a": ("success", "success"),
        "b": ("failed", "failed"),
        "c": ("upstream_failed", "skipped"),
        "d": ("success", "success"),
        "e": ("running", "running"),
        "f": ("waiting", "waiting"),
        "g": ("skipped", "skipped"),
    }
    assert page.count('class="dag-edge') == 4  # a->b, b->c, d->g, e->f
    assert 'data-source="b" data-target="c"' in page
    # Nodes that ran link to their execution; the Gantt has a bar for each of them.
    b = DagNodeState.objects.get(run=run, node_id="b")
    assert f'href="/dashboard/executions/{b.execution_id}"' in page
    assert page.count('class="gantt-bar') == 4  # a, b, d, e
    assert "ValueError: boom" in page  # the errors table
    assert "data-live-final" not in page  # still running: the page keeps polling


def test_a_finished_run_tells_the_page_to_stop_polling(signed_in, dag_run):
    dag, run = dag_run
    DagRun.platform.filter(id=run.id).update(status="failed")
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}?fragment=1").content.decode()
    assert 'data-live-final="run failed"' in page
    assert "btn-run-rerun" in page and "btn-run-cancel" not in page


def test_a_node_execution_links_back_to_its_run(signed_in, dag_run):
    dag, run = dag_run
    b = DagNodeState.objects.get(run=run, node_id="b")
    page = signed_in.get(f"/dashboard/executions/{b.execution_id}").content.decode()
    assert f'href="/dashboard/dags/{dag.id}/runs/{run.id}"' in page
    assert 'id="dag-node-link"' in page


def test_another_tenants_dag_and_run_are_not_found(signed_in, tenant_factory):
    other, _ = tenant_factory("globex")
    dag = make_dag(other)
    run = make_dag_run(dag)
    for url in (
        f"/dashboard/dags/{dag.id}",
        f"/dashboard/dags/{dag.id}/runs/{run.id}",
        f"/dashboard/dags/{dag.id}/runs/{run.id}?fragment=1",
    ):
        assert signed_in.get(url).status_code == 404, url
    assert signed_in.post(f"/dashboard/dags/{dag.id}/pause").status_code == 404
    assert signed_in.post(f"/dashboard/dags/{dag.id}/trigger").status_code == 404
    assert signed_in.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/cancel").status_code == 404
    assert "etl-pipeline" not in signed_in.get("/dashboard/dags").content.decode()
    # Their execution shows nothing of theirs either.
    b = DagNodeState.objects.get(run=run, node_id="b")
    assert signed_in.get(f"/dashboard/executions/{b.execution_id}").status_code == 404
    dag.refresh_from_db()
    assert dag.paused is False
    assert DagRun.platform.filter(dag=dag).count() == 1


def test_own_dag_under_another_dags_url_is_not_found(signed_in, dag_run, tenant):
    _, run = dag_run
    sibling = make_dag(
        tenant,
        raw={
            "dag": "other",
            "tasks": [{"id": "x", "handler": {"type": "python", "callable": "noop"}}],
        },
    )
    assert signed_in.get(f"/dashboard/dags/{sibling.id}/runs/{run.id}").status_code == 404
    assert signed_in.get("/dashboard/dags/not-a-uuid").status_code == 404


def test_pause_resume_and_trigger_buttons_call_the_services(signed_in, tenant):
    dag = make_dag(tenant)
    signed_in.post(f"/dashboard/dags/{dag.id}/pause")
    dag.refresh_from_db()
    assert dag.paused
    signed_in.post(f"/dashboard/dags/{dag.id}/resume")
    dag.refresh_from_db()
    assert not dag.paused and dag.next_fire_at is not None
    response = signed_in.post(f"/dashboard/dags/{dag.id}/trigger")
    run = DagRun.platform.get(dag=dag)
    assert response.status_code == 302
    assert response["Location"] == f"/dashboard/dags/{dag.id}/runs/{run.id}"
    assert run.trigger == "manual" and run.status == "running"
    # The roots were dispatched by the engine, as for an API trigger.
    assert TaskExecution.platform.filter(tenant=tenant, trigger="dag").count() == 3
    assert signed_in.post(f"/dashboard/dags/{dag.id}/explode").status_code == 404


def test_cancel_button_cancels_the_run(signed_in, dag_run):
    dag, run = dag_run
    signed_in.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/cancel")
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_viewer_sees_pages_but_cannot_press_buttons(tenant_and_user, dag_run):
    dag, run = dag_run
    _, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    client = Client()
    client.login(username=user.username, password="pw-123456")
    page = client.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert "btn-dag-trigger" not in page and "btn-dag-pause" not in page
    assert (
        "btn-run-cancel"
        not in client.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    )
    assert client.post(f"/dashboard/dags/{dag.id}/trigger").status_code == 403
    assert client.post(f"/dashboard/dags/{dag.id}/pause").status_code == 403
    assert client.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/cancel").status_code == 403
    assert DagRun.platform.filter(dag=dag).count() == 1
    assert Dag.platform.get(id=dag.id).paused is False


def test_the_list_shows_the_last_eight_runs_of_each_dag(signed_in, tenant):
    dag = make_dag(tenant)
    runs = [make_dag_run(dag, started_seconds_ago=100 - i) for i in range(10)]
    page = signed_in.get("/dashboard/dags").content.decode()
    assert page.count("status run-chip") == 8
    assert str(runs[-1].id) in page and str(runs[1].id) not in page


def test_a_mapped_node_shows_its_shard_progress(signed_in, dag_run):
    dag, run = dag_run
    DagNodeState.objects.filter(run=run, node_id="e").update(map_total=10, map_finished=4)
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert "shards 4/10" in page and 'class="shard-bar"' in page


def test_a_rerun_nodes_every_attempt_is_in_its_history_and_the_gantt(signed_in, tenant):
    """Re-run from the page's button: node b's failed first attempt stays visible (the table
    of attempts, a bar of its own), beside the new one, with who started it."""
    dag = make_dag(tenant)
    run = make_dag_run(dag, ENDED_RUN_STATES)
    DagRun.platform.filter(id=run.id).update(status="failed", remaining_nodes=0)
    first = DagNodeState.objects.get(run=run, node_id="b").execution_id
    url = f"/dashboard/dags/{dag.id}/runs/{run.id}"
    response = signed_in.post(f"{url}/rerun")
    assert response.status_code == 302
    page = signed_in.get(url).content.decode()
    table = page.split('id="node-attempts"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-node-id="([^"]+)" data-attempt="(\d)"( data-current="1")?', table)
    assert rows == [
        ("b", "1", ""),
        ("b", "2", ' data-current="1"'),
        ("c", "1", ""),
        ("c", "2", ' data-current="1"'),
    ]
    first_row = table.split('data-attempt="1"')[1].split("</tr>")[0]
    assert f'href="/dashboard/executions/{first}"' in first_row and "failed" in first_row
    assert "ValueError: boom" in first_row and "the run" in first_row
    second_row = table.split('data-attempt="2"')[1].split("</tr>")[0]
    assert "re-run of the run" in second_row and "user:" in second_row
    gantt_b = page.split('class="gantt-row" data-node-id="b"')[1].split('class="gantt-row"')[0]
    assert 'data-attempts="2"' in gantt_b and "#2" in gantt_b
    # The graph's box says which attempt of the node it shows.
    box_b = page.split('data-node-id="b" data-state=')[1].split("</g>")[0]
    assert "#2 · attempts" in box_b
    assert "the node's attempt 2 in this run" in box_b
    assert re.search(r'class="gantt-bar gantt-earlier tone-failed" data-attempt="1"', gantt_b)
    # A node run once has no earlier bar; the fragment the live poll fetches has it all too.
    gantt_a = page.split('class="gantt-row" data-node-id="a"')[1].split('class="gantt-row"')[0]
    assert "gantt-earlier" not in gantt_a and 'data-attempts="1"' in gantt_a
    assert 'id="node-attempts"' in signed_in.get(url + "?fragment=1").content.decode()


def test_a_run_nobody_re_ran_has_no_attempts_table(signed_in, dag_run):
    dag, run = dag_run
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'id="node-attempts"' not in page and "gantt-earlier" not in page


def test_an_earlier_attempts_execution_is_still_named_by_its_run_and_node(signed_in, tenant):
    dag = make_dag(tenant)
    run = make_dag_run(dag, ENDED_RUN_STATES)
    DagRun.platform.filter(id=run.id).update(status="failed", remaining_nodes=0)
    first = DagNodeState.objects.get(run=run, node_id="b").execution_id
    assert signed_in.post(f"/dashboard/dags/{dag.id}/runs/{run.id}/rerun").status_code == 302
    page = signed_in.get(f"/dashboard/executions/{first}").content.decode()
    node_link = page.split('id="dag-node-link"')[1].split("</p>")[0]
    assert "<strong>b</strong>" in node_link
    assert f'href="/dashboard/dags/{dag.id}/runs/{run.id}"' in node_link
    # The Runs page's DAG filter finds it, named by DAG, run and node, linked to the run.
    runs = signed_in.get("/dashboard/runs?dag=etl-pipeline&window=all").content.decode()
    row = runs.split(f'data-execution-id="{first}"')[1].split("</tr>")[0]
    assert f'href="/dashboard/dags/{dag.id}/runs/{run.id}"' in row and "› b" in row
