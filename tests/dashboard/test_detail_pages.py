"""Task and execution pages say what people look for: the handler as fields (not a repr),
the zone beside the cron expression, tags, policies, the last run and its duration, the full
log and a download link; a DAG node's hidden task offers no buttons and names its DAG."""

from __future__ import annotations

import pytest

from scheduler_app.choices import DAG_NODE_TAG, ExecutionStatus
from scheduler_app.models import ExecutionLog, TaskDefinition
from tests.dashboard.conftest import add_execution, make_dag
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def test_task_page_reads_like_a_definition(signed_in, tenant):
    task = make_task(
        tenant,
        name="berlin-report",
        description="Sends the morning report.",
        tags=["reports", "daily"],
        schedule={"type": "cron", "expression": "0 7 * * *", "timezone": "Europe/Berlin"},
        handler={"type": "shell", "command": ["python3", "-c", "print(1)"]},
    )
    add_execution(task, minutes_ago=3, status=ExecutionStatus.FAILED, duration=2.5)
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    handler = page.split('id="task-handler"')[1].split("</td>")[0]
    assert "<dt>command</dt><dd><code>python3 -c print(1)</code></dd>" in handler
    assert "{'" not in handler and "['" not in handler  # no Python repr
    assert '<code>0 7 * * *</code> <span class="zone">in Europe/Berlin</span>' in page
    assert "Sends the morning report." in page
    assert 'href="/dashboard/runs?tag=reports&amp;window=7d"' in page
    assert "catch-up" in page.split('id="task-policies"')[1].split("</td>")[0]
    last = page.split('id="task-last-run"')[1].split("</td>")[0]
    assert "Failed" in last and "took 2.5 s" in last


def test_execution_page_links_the_full_log_and_a_download(signed_in, tenant):
    task = make_task(tenant, name="logged")
    execution = add_execution(task, minutes_ago=1, status=ExecutionStatus.SUCCESS, duration=1.2)
    ExecutionLog.objects.create(
        execution_id=execution.id, tenant=tenant, text="\n".join(f"line {i}" for i in range(900))
    )
    page = signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    assert f'id="log-full" href="/dashboard/executions/{execution.id}/log?full=1"' in page
    assert f'download="execution-{execution.id}.log"' in page
    assert 'id="execution-duration">took 1.2 s<' in page
    full = signed_in.get(f"/dashboard/executions/{execution.id}/log?full=1").content.decode()
    assert full.startswith("line 0\n") and full.endswith("line 899")  # all of it, not the tail
    download = signed_in.get(f"/dashboard/executions/{execution.id}/log?full=1&download=1")
    assert download["Content-Disposition"].startswith("attachment;")


def test_a_dag_nodes_hidden_task_has_no_buttons_and_refuses_them(signed_in, tenant):
    dag = make_dag(tenant)
    hidden = TaskDefinition.platform.filter(tenant=tenant, tags__contains=[DAG_NODE_TAG]).first()
    page = signed_in.get(f"/dashboard/tasks/{hidden.id}").content.decode()
    assert 'id="dag-node-task"' in page and f'href="/dashboard/dags/{dag.id}"' in page
    for button in ("btn-trigger", "btn-pause", "btn-resume", "btn-edit"):
        assert f'id="{button}"' not in page
    # Posting the buttons' forms anyway is refused and runs nothing.
    executions = hidden.executions.count()
    assert signed_in.post(f"/dashboard/tasks/{hidden.id}/trigger").status_code == 403
    assert signed_in.post(f"/dashboard/tasks/{hidden.id}/pause").status_code == 403
    assert signed_in.get(f"/dashboard/tasks/{hidden.id}/edit").status_code == 403
    assert hidden.executions.count() == executions
    hidden.refresh_from_db()
    assert not hidden.paused


def test_dag_page_grid_shows_each_node_of_each_recent_run_in_its_state(signed_in, tenant):
    import re

    from tests.dashboard.conftest import RUN_STATES, make_dag_run

    dag = make_dag(tenant)
    older = make_dag_run(dag, started_seconds_ago=600)
    newer = make_dag_run(dag, {**RUN_STATES, "b": ("success", 2.1, 3.0)}, started_seconds_ago=60)
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    grid = page.split('id="dag-grid"')[1].split("</table>")[0]
    runs = re.findall(r'href="/dashboard/dags/[^/]+/runs/([0-9a-f-]+)"', grid)
    assert runs == [str(older.id), str(newer.id)]  # oldest left
    rows = dict(re.findall(r'<tr data-node-id="(\w)">(.*?)</tr>', grid))
    assert list(rows) == list("abcdefg")  # the definition's order
    states = {node: re.findall(r'data-state="(\w*)"', cells) for node, cells in rows.items()}
    assert states["b"] == ["failed", "success"]
    assert states["c"] == ["upstream_failed", "upstream_failed"]
    assert 'class="cell tone-failed"' in rows["b"] and "/dashboard/executions/" in rows["b"]


def test_a_dag_is_triggered_with_parameters_or_refused_at_the_line(signed_in, tenant):
    from dags.models import DagRun

    dag = make_dag(tenant)
    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/trigger", {"parameters": '{\n  "date": "2030-01-01",\n}'}
    )
    assert response.status_code == 302
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert "Nothing was triggered. Parameters: not valid JSON" in page and "(line 3," in page
    assert not DagRun.platform.filter(dag=dag).exists()
    assert signed_in.post(f"/dashboard/dags/{dag.id}/trigger", {"parameters": "[1, 2]"})
    assert not DagRun.platform.filter(dag=dag).exists()

    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/trigger", {"parameters": '{"date": "2030-01-01"}'}, follow=True
    )
    run = DagRun.platform.get(dag=dag)
    assert run.parameters == {"date": "2030-01-01"}
    assert f'href="/dashboard/dags/{dag.id}/runs/{run.id}"' in response.content.decode()


def test_dag_page_draws_its_definition(signed_in, tenant):
    import re

    dag = make_dag(tenant)
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    graph = page.split('id="dag-definition-graph"')[1].split("</svg>")[0]
    assert sorted(re.findall(r'data-node-id="(\w)"', graph)) == list("abcdefg")
    edges = set(re.findall(r'data-source="(\w)" data-target="(\w)"', graph))
    assert edges == {("a", "b"), ("b", "c"), ("e", "f"), ("d", "g")}
    assert "python noop" in graph  # what each node runs, not a run's state


def test_dag_run_page_lists_each_shard_with_its_latest_attempt_and_log(signed_in, tenant):
    from dags.models import DagNodeExecution
    from tests.dashboard.conftest import make_dag_run

    dag = make_dag(tenant)
    run = make_dag_run(dag)
    task = TaskDefinition.platform.filter(tenant=tenant, tags__contains=[DAG_NODE_TAG]).first()
    first = add_execution(task, minutes_ago=1, status=ExecutionStatus.FAILED)
    retry = add_execution(task, minutes_ago=0.5, status=ExecutionStatus.SUCCESS, root=first.id)
    retry.attempt = 2
    retry.save(update_fields=["attempt"])
    other = add_execution(task, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    for index, root in enumerate((first, other)):
        DagNodeExecution.objects.create(
            execution_root_id=root.id, run=run, node_id="b", shard_index=index
        )
    page = signed_in.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    shards = page.split('id="shards"')[1].split("</table>")[0]
    assert shards.count("<tr data-node-id") == 2
    assert f"/dashboard/executions/{retry.id}" in shards  # the latest attempt of shard 0
    assert f"/dashboard/executions/{first.id}" not in shards
    assert f"/dashboard/executions/{other.id}/log?full=1" in shards


def test_task_page_calendar_counts_past_fires_by_outcome_and_plans_the_next(signed_in, tenant):
    import re
    from datetime import timedelta

    from django.utils import timezone

    task = make_task(
        tenant,
        name="daily",
        schedule={"type": "cron", "expression": "0 6 * * *", "timezone": "UTC"},
    )
    add_execution(task, minutes_ago=60 * 24 * 2, status=ExecutionStatus.SUCCESS)
    add_execution(task, minutes_ago=60 * 24 * 2 + 5, status=ExecutionStatus.FAILED)
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    calendar = page.split('id="fire-calendar"')[1].split("</table>")[0]
    rows = dict(re.findall(r'<tr data-day="([\d-]+)"[^>]*>(.*?)</tr>', calendar))
    assert len(rows) == 15  # a week back, today, a week ahead
    two_days_ago = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%d")
    cells = re.findall(r"<td>(.*?)</td>", rows[two_days_ago])
    assert ">1</a>" in cells[0] and ">1</a>" in cells[1]  # one success, one failure, linked
    assert f"since={two_days_ago}T00:00" in cells[0]
    future = sorted(day for day in rows if day > timezone.now().strftime("%Y-%m-%d"))
    assert all(re.findall(r"<td>(.*?)</td>", rows[day])[3] == "1" for day in future)


def test_task_page_calendar_plans_no_more_fires_than_the_runs_left(signed_in, tenant):
    import re

    task = make_task(
        tenant,
        name="three-more-days",
        schedule={"type": "cron", "expression": "0 6 * * *", "timezone": "UTC"},
        policy={"remaining_runs": 3},
    )
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    calendar = page.split('id="fire-calendar"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-day="[\d-]+"[^>]*>(.*?)</tr>', calendar)
    planned = [re.findall(r"<td>(.*?)</td>", row)[3] for row in rows]
    assert sum(int(cell) for cell in planned if cell.isdigit()) == 3


def test_execution_page_links_its_flower_row_and_says_when_a_batch_hides_it(
    signed_in, tenant, settings
):
    settings.MONITORING = {**settings.MONITORING, "FLOWER_URL": "http://flower.example:5555"}
    task = make_task(tenant, name="flowered")
    execution = add_execution(task, minutes_ago=1, status=ExecutionStatus.FAILED)
    page = signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    # A single run's Celery task id is its execution id (scheduler_app/ringing/publish.py).
    assert f'id="flower-link" href="http://flower.example:5555/task/{execution.id}"' in page
    assert "workers.run_execution_batch" in page and "search Flower" in page
