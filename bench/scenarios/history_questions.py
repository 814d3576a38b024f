"""The design document's three execution-history questions, asked of `bench history`'s data:

1. "failed executions of task X in the last 24 h": `GET /api/v1/executions?task=X&
   status=failed&since=<24 h ago>` (the first page, newest first);
2. "the timeline of DAG run Y": `GET /api/v1/dags/{dag}/executions/{run}` (the run, its
   nodes with their attempts and times);
3. "P95 for task Z over the last week": `GET /api/v1/tasks/{id}/stats?window=7d` (by the
   day, and by the hour), from the stats buckets.

Each through the real DRF stack with a JWT, p50/p95 over many tasks or runs. The DAG runs
(and their nodes' executions, part of the history's row count) are generated in SQL here.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import datetime, timedelta
from typing import Any

from bench.report import Result

DAG_NODES = ("extract", "transform", "load", "verify", "report")
NOOP = {"type": "python", "callable": "noop"}


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered) * 1000, p95 * 1000


def dag_runs_load(
    *, tenant: Any, dag_count: int, runs: int, span_start: datetime, span_seconds: float
) -> int:
    """`dag_count` five-node chains with `runs` ended runs between them, spread over the
    span, each node with its execution (trigger `dag`). Returns the executions written."""
    from django.db import connection

    from dags.models import DagNodeExecution, DagNodeState, DagRun
    from dags.services.definitions import current_version, dag_create
    from scheduler_app.models import TaskExecution

    plan = []
    for index in range(dag_count):
        tasks = [
            {"id": node, "handler": NOOP, **({"depends_on": [DAG_NODES[i - 1]]} if i else {})}
            for i, node in enumerate(DAG_NODES)
        ]
        dag = dag_create(tenant=tenant, raw={"dag": f"bench-dag-{index}", "tasks": tasks})
        version = current_version(dag)
        for order, node in enumerate(DAG_NODES):
            plan.append(
                (str(dag.id), str(version.id), index, node, order, version.node_tasks[node])
            )
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE bench_dag_plan (dag_id uuid, version_id uuid, dag_index int,"
            " node_id text, ord int, task_id uuid)"
        )
        cursor.executemany("INSERT INTO bench_dag_plan VALUES (%s, %s, %s, %s, %s, %s)", plan)
        # Runs: every 40th failed (at its third node), the others succeeded.
        cursor.execute(
            f"""
            INSERT INTO {DagRun._meta.db_table}
              (id, tenant_id, dag_id, version_id, status, trigger, scheduled_at, parameters,
               remaining_nodes, started_at, completed_at, created_at)
            SELECT gen_random_uuid(), %(tenant)s, p.dag_id, p.version_id,
                   CASE WHEN g %% 40 = 0 THEN 'failed' ELSE 'success' END, 'schedule', s.at,
                   NULL, 0, s.at + (g %% 900) * interval '1 millisecond',
                   s.at + (g %% 900) * interval '1 millisecond'
                        + (5 + g %% 50) * interval '1 second', s.at
            FROM generate_series(0, %(runs)s - 1) g
            JOIN bench_dag_plan p ON p.dag_index = g %% %(dags)s AND p.ord = 0,
                 LATERAL (SELECT %(start)s::timestamptz
                          + (g * %(step)s) * interval '1 second' AS at) s
            """,
            {
                "tenant": tenant.id,
                "runs": runs,
                "dags": dag_count,
                "start": span_start,
                "step": span_seconds / runs,
            },
        )
        cursor.execute(
            f"""
            CREATE TEMP TABLE bench_dag_nodes AS
            SELECT r.id AS run_id, r.tenant_id, p.node_id, p.ord, p.task_id,
                   gen_random_uuid() AS execution_id,
                   r.started_at + p.ord * interval '1 second' AS started_at,
                   CASE WHEN r.status = 'failed' AND p.ord > 2 THEN 'upstream_failed'
                        WHEN r.status = 'failed' AND p.ord = 2 THEN 'failed'
                        ELSE 'success' END AS status
            FROM {DagRun._meta.db_table} r JOIN bench_dag_plan p ON p.dag_id = r.dag_id
            WHERE r.tenant_id = %s
            """,
            [tenant.id],
        )
        cursor.execute(
            f"""
            INSERT INTO {TaskExecution._meta.db_table}
              (id, tenant_id, task_id, status, trigger, priority, queue, scheduled_at,
               queued_at, started_at, completed_at, attempt, max_attempts, root_execution_id,
               worker_id, parameters, result, exit_code, error_message, error_class,
               dead_lettered, created_at, updated_at)
            SELECT execution_id, tenant_id, task_id, status, 'dag', 5, 'normal', started_at,
                   started_at, started_at, started_at + interval '900 milliseconds', 1, 3,
                   execution_id, 'bench@host', NULL, '{{"ok": true}}', 0,
                   CASE WHEN status = 'failed' THEN 'ValueError: boom' ELSE '' END, '', false,
                   started_at, started_at
            FROM bench_dag_nodes WHERE status <> 'upstream_failed'
            """
        )
        written = cursor.rowcount
        cursor.execute(
            f"""
            INSERT INTO {DagNodeExecution._meta.db_table}
              (execution_root_id, run_id, node_id, shard_index, status, result)
            SELECT execution_id, run_id, node_id, NULL, status, NULL
            FROM bench_dag_nodes WHERE status <> 'upstream_failed'
            """
        )
        cursor.execute(
            f"""
            INSERT INTO {DagNodeState._meta.db_table}
              (run_id, node_id, status, remaining_upstream, upstream_succeeded,
               upstream_failed, upstream_skipped, execution_id, attempts, map_total,
               map_finished, result, error_message, started_at, completed_at, updated_at,
               attempt_number, attempt_trigger, attempt_triggered_by)
            SELECT run_id, node_id, status, 0, CASE WHEN ord > 0 THEN 1 ELSE 0 END, 0, 0,
                   CASE WHEN status = 'upstream_failed' THEN NULL ELSE execution_id END,
                   CASE WHEN status = 'upstream_failed' THEN 0 ELSE 1 END, NULL, 0, NULL,
                   CASE WHEN status = 'failed' THEN 'ValueError: boom' ELSE '' END,
                   CASE WHEN status = 'upstream_failed' THEN NULL ELSE started_at END,
                   started_at + interval '900 milliseconds', started_at + interval '1 second',
                   1, 'run', ''
            FROM bench_dag_nodes
            """
        )
        cursor.execute("DROP TABLE bench_dag_nodes; DROP TABLE bench_dag_plan")
    return written


def questions_measure(*, result: Result, client: Any, tenant: Any, now: datetime) -> None:
    """Ask each question of 200 tasks or runs; add p50 and p95 of each to `result`."""
    from dags.models import DagRun
    from scheduler_app.models import TaskDefinition, TaskExecution

    chooser = random.Random(30)
    task_ids = [
        str(t)
        # The plain tasks (a DAG's node tasks are named `dag:<dag>/<node>...`).
        for t in TaskDefinition.platform.filter(
            tenant=tenant, name__startswith="bench-"
        ).values_list("id", flat=True)
    ]
    tasks = chooser.sample(task_ids, min(200, len(task_ids)))
    since = (now - timedelta(hours=24)).isoformat()
    failed_found: list[int] = []

    def failed_runs(task_id: str) -> Any:
        response = client.get(
            "/api/v1/executions", {"task": task_id, "status": "failed", "since": since}
        )
        failed_found.append(len(response.json()["results"]))
        return response

    # The tasks that failed in the last day (the generator fails whole tasks: 1 in 50),
    # asked in turn: a full page of failed runs each, where most tasks answer none.
    failing = sorted(
        {
            str(t)
            for t in TaskExecution.platform.filter(
                tenant=tenant,
                status="failed",
                scheduled_at__gte=now - timedelta(hours=24),
                task__name__startswith="bench-",
            ).values_list("task_id", flat=True)
        }
    )
    failing_turns = [failing[i % len(failing)] for i in range(200)] if failing else []
    runs = list(
        DagRun.platform.filter(tenant=tenant).order_by("?").values_list("dag_id", "id")[:200]
    )
    nodes_seen: list[int] = []

    def timeline(pair: tuple[Any, Any]) -> Any:
        response = client.get(f"/api/v1/dags/{pair[0]}/executions/{pair[1]}")
        nodes_seen.append(len(response.json()["nodes"]))
        return response

    def week(bucket: str):
        def ask(task_id: str) -> Any:
            return client.get(f"/api/v1/tasks/{task_id}/stats", {"window": "7d", "bucket": bucket})

        return ask

    questions = [
        ("failed runs of a task, last 24 h", failed_runs, tasks),
        ("failed runs of a failing task, last 24 h", failed_runs, failing_turns),
        ("timeline of a DAG run", timeline, runs),
        ("p95 of a task over the last week (by day)", week("day"), tasks),
        ("p95 of a task over the last week (by hour)", week("hour"), tasks),
    ]
    for label, ask, subjects in questions:
        if not subjects:
            continue
        failed_found.clear()
        samples = []
        for subject in subjects:
            t0 = time.perf_counter()
            response = ask(subject)
            samples.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.content
        p50, p95 = _ms(samples)
        asked = len(set(subjects))
        detail = f"{len(samples)} questions of {asked} {'runs' if 'DAG' in label else 'tasks'}"
        if ask is failed_runs:
            detail += f", {statistics.mean(failed_found):.1f} failed runs found on average"
        if ask is timeline:
            detail += f", {min(nodes_seen)}-{max(nodes_seen)} nodes each"
        result.add(measure=f"Q: {label} p50", value=p50, unit="ms", detail=detail)
        result.add(measure=f"Q: {label} p95", value=p95, unit="ms", detail="target <= 200")
