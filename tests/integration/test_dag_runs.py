"""DAG runs end to end with real PostgreSQL, Redis and Celery workers."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from dags.models import DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.task_schedule import schedule_of
from tests.integration.conftest import dump_logs
from tests.processes import wait_for_beat_tick, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = {"type": "python", "callable": "upstream_echo"}


def node(node_id, *depends_on, handler=None, **extra):
    return {"id": node_id, "handler": handler or ECHO, "depends_on": list(depends_on), **extra}


def run_dag(tenant, worker, tasks, timeout=60, **dag_fields):
    dag = dag_create(tenant=tenant, raw={"dag": "d", "tasks": tasks, **dag_fields})
    run = dag_trigger(dag=dag)
    try:
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status not in ("running", "queued"),
            timeout=timeout,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    run.refresh_from_db()
    return run, {s.node_id: s for s in DagNodeState.objects.filter(run=run)}


def executions_of(run):
    from dags.models import DagNodeExecution

    roots = DagNodeExecution.objects.filter(run=run).values_list("execution_root_id", flat=True)
    return TaskExecution.platform.filter(root_execution_id__in=list(roots))


def test_diamond_runs_in_order_and_passes_results(tenant, live_worker):
    run, nodes = run_dag(
        tenant,
        live_worker,
        [
            node("a", parameters={"v": 1}),
            node("b", "a", parameters={"v": 2}),
            node("c", "a", parameters={"v": 3}),
            node("d", "b", "c"),
        ],
    )
    assert run.status == "success"
    assert {n: s.status for n, s in nodes.items()} == dict.fromkeys("abcd", "success")
    upstream = nodes["d"].result["upstream"]
    assert upstream["b"]["v"] == 2 and upstream["c"]["v"] == 3
    assert upstream["b"]["upstream"]["a"]["v"] == 1
    execs = {e.root_execution_id: e for e in executions_of(run)}
    by_node = {s.node_id: execs[s.execution_id] for s in nodes.values()}
    assert by_node["d"].started_at >= max(by_node["b"].completed_at, by_node["c"].completed_at)
    assert by_node["b"].started_at >= by_node["a"].completed_at
    assert all(e.trigger == "dag" for e in by_node.values())


def test_a_100_step_chain_runs_each_step_once_in_order(tenant, live_worker):
    steps = [node("s0", parameters={"i": 0})] + [
        node(f"s{i}", f"s{i - 1}", handler={"type": "python", "callable": "noop"})
        for i in range(1, 100)
    ]
    run, nodes = run_dag(tenant, live_worker, steps, timeout=120)
    assert run.status == "success"
    execs = {e.root_execution_id: e for e in executions_of(run)}
    assert len(execs) == 100 and executions_of(run).count() == 100
    ordered = [execs[nodes[f"s{i}"].execution_id] for i in range(100)]
    for upstream, downstream in itertools.pairwise(ordered):
        assert downstream.started_at >= upstream.completed_at


def test_a_200_wide_fan_out_then_fan_in(tenant, live_worker, beats):
    # Wider than a tenant's fair in-flight cap: the rest waits as pending rows that the
    # leader publishes as room frees up, as in production.
    beats("solo")
    noop = {"type": "python", "callable": "noop"}
    wide = [node(f"w{i}", "start", handler=noop) for i in range(200)]
    tasks = [node("start", handler=noop), *wide, node("join", *[f"w{i}" for i in range(200)])]
    run, nodes = run_dag(tenant, live_worker, tasks, timeout=180)
    assert run.status == "success"
    assert set(nodes["join"].result["upstream"]) == {f"w{i}" for i in range(200)}
    assert executions_of(run).count() == 202
    join = TaskExecution.platform.get(id=nodes["join"].execution_id)
    last_wide = max(
        TaskExecution.platform.get(id=nodes[f"w{i}"].execution_id).completed_at for i in range(200)
    )
    assert join.started_at >= last_wide


def test_invoice_receipt_branching(tenant, live_worker):
    tasks = [
        node(
            "classify",
            handler={"type": "python", "callable": "echo"},
            parameters={"type": "invoice"},
        ),
        node(
            "process-invoice",
            "classify",
            condition={"field": "classify.result.type", "equals": "invoice"},
        ),
        node(
            "process-receipt",
            "classify",
            condition={"field": "classify.result.type", "equals": "receipt"},
        ),
        node("after-receipt", "process-receipt"),
        node("archive", "process-invoice", "process-receipt", trigger_rule="one_success"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks)
    statuses = {n: s.status for n, s in nodes.items()}
    assert statuses == {
        "classify": "success",
        "process-invoice": "success",
        "process-receipt": "skipped",
        "after-receipt": "skipped",  # skips propagate
        "archive": "success",
    }
    assert run.status == "success"
    assert nodes["process-invoice"].result["upstream"] == {"classify": {"type": "invoice"}}
    assert nodes["process-receipt"].execution_id is None  # never dispatched


FAIL = {"type": "python", "callable": "fail"}
ONCE = {"max_attempts": 1}


def failing_diamond(policy):
    return {
        "failure_policy": policy,
        "tasks": [
            node("a"),
            node("bad", "a", handler=FAIL, retry_policy=ONCE),
            node(
                "slow",
                "a",
                handler={"type": "python", "callable": "sleep"},
                parameters={"seconds": 1.5},
            ),
            node("after-bad", "bad"),
            node("after-slow", "slow"),
            node("cleanup", "bad", trigger_rule="all_done"),
        ],
    }


def test_skip_downstream_policy(tenant, live_worker):
    spec = failing_diamond("skip_downstream")
    run, nodes = run_dag(tenant, live_worker, spec.pop("tasks"), **spec)
    statuses = {n: s.status for n, s in nodes.items()}
    assert statuses == {
        "a": "success",
        "bad": "failed",
        "slow": "success",
        "after-bad": "upstream_failed",
        "after-slow": "success",
        "cleanup": "success",  # all_done runs whatever happened upstream
    }
    assert run.status == "partially_completed"


def test_continue_policy_runs_downstream_anyway(tenant, live_worker):
    spec = failing_diamond("continue")
    run, nodes = run_dag(tenant, live_worker, spec.pop("tasks"), **spec)
    assert nodes["after-bad"].status == "success"
    assert nodes["after-bad"].result["upstream"] == {"bad": None}
    assert run.status == "partially_completed"


def test_fail_all_policy_cancels_the_rest_and_fails_the_run(tenant, live_worker):
    spec = failing_diamond("fail_all")
    run, nodes = run_dag(tenant, live_worker, spec.pop("tasks"), **spec)
    assert run.status == "failed"
    assert nodes["bad"].status == "failed"
    assert nodes["after-slow"].status == "cancelled"
    assert nodes["after-bad"].status == "cancelled"
    # Nothing downstream of the failure ever got an execution.
    assert nodes["after-slow"].execution_id is None and nodes["cleanup"].execution_id is None


def test_one_success_with_every_upstream_failed_is_upstream_failed(tenant, live_worker):
    tasks = [
        node("x", handler=FAIL, retry_policy=ONCE),
        node("y", handler=FAIL, retry_policy=ONCE),
        node("z", "x", "y", trigger_rule="one_success"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks)
    assert nodes["z"].status == "upstream_failed"
    assert run.status == "failed"


def test_cancelling_a_running_dag_run(tenant, live_worker):
    from dags.services.runs import dag_run_cancel

    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "cancel-me",
            "tasks": [
                node(
                    "slow",
                    handler={"type": "python", "callable": "sleep"},
                    parameters={"seconds": 10},
                ),
                node("next", "slow"),
            ],
        },
    )
    run = dag_trigger(dag=dag)
    wait_until(
        lambda: TaskExecution.platform.filter(
            id=DagNodeState.objects.get(run=run, node_id="slow").execution_id, status="running"
        ).exists(),
        timeout=30,
        message="the slow node to start",
    )
    run = dag_run_cancel(run=run)
    assert run.status == "cancelled"
    slow_exec = DagNodeState.objects.get(run=run, node_id="slow").execution_id
    # The running node is killed (its worker is told, as by the cancel endpoint), not left
    # to sleep out its 10 s.
    wait_until(
        lambda: TaskExecution.platform.get(id=slow_exec).status == "cancelled",
        timeout=15,
        message="the running node's execution to be cancelled",
    )
    states = {s.node_id: s.status for s in DagNodeState.objects.filter(run=run)}
    assert states == {"slow": "cancelled", "next": "cancelled"}
    assert DagNodeState.objects.get(run=run, node_id="next").execution_id is None
    assert DagRun.platform.get(id=run.id).status == "cancelled"
    # A cancelled run can be re-run; the old execution no longer belongs to the node.
    from dags.services.runs import dag_run_rerun

    dag_run_rerun(run=run)
    wait_until(lambda: DagRun.platform.get(id=run.id).status != "running", timeout=60)
    assert DagRun.platform.get(id=run.id).status == "success"
    assert DagNodeState.objects.get(run=run, node_id="slow").execution_id != slow_exec
    # The cancelled attempt is kept in the node's history, its execution still the node's.
    from dags.models import DagNodeAttempt, DagNodeAttemptExecution

    kept = DagNodeAttempt.objects.get(run=run, node_id="slow")
    assert (kept.number, kept.status, kept.execution_id) == (1, "cancelled", slow_exec)
    assert DagNodeAttemptExecution.objects.get(execution_root_id=slow_exec).attempt == kept
    assert DagNodeState.objects.get(run=run, node_id="slow").attempt_number == 2


@pytest.mark.needs_os_tool("bubblewrap")
def test_re_run_from_the_failed_nodes(tenant, live_worker):
    from dags.services.runs import dag_run_rerun

    # The gate opens once its task's parameters say so (the test flips them before re-run).
    gate = {
        "type": "shell",
        "command": [
            "python3",
            "-c",
            "import json, os, sys; "
            "sys.exit(0 if json.loads(os.environ['TASK_PARAMETERS']).get('open') else 3)",
        ],
    }
    tasks = [
        node("first"),
        node("gate", "first", handler=gate, retry_policy=ONCE),
        node("after", "gate"),
        node("side", "first"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks)
    assert run.status == "partially_completed"
    assert nodes["gate"].status == "failed" and nodes["after"].status == "upstream_failed"
    first_exec = nodes["first"].execution_id
    failed_gate = nodes["gate"].execution_id
    gate_task_id = TaskExecution.platform.get(id=failed_gate).task_id
    TaskDefinition.platform.filter(id=gate_task_id).update(parameters={"open": True})
    dag_run_rerun(run=run)
    wait_until(lambda: DagRun.platform.get(id=run.id).status != "running", timeout=60)
    nodes = {s.node_id: s for s in DagNodeState.objects.filter(run=run)}
    assert DagRun.platform.get(id=run.id).status == "success"
    assert {n: s.status for n, s in nodes.items()} == dict.fromkeys(nodes, "success")
    assert nodes["first"].execution_id == first_exec  # succeeded nodes were not run again
    # Each re-run node's failed first attempt is kept beside the attempt that succeeded.
    from dags.models import DagNodeAttempt

    kept = {a.node_id: a for a in DagNodeAttempt.objects.filter(run=run)}
    assert set(kept) == {"gate", "after"}
    assert (kept["gate"].status, kept["gate"].execution_id) == ("failed", failed_gate)
    assert kept["after"].status == "upstream_failed"
    assert (nodes["gate"].attempt_number, nodes["gate"].attempt_trigger) == (2, "rerun")
    assert (
        TaskExecution.platform.filter(
            task_id=TaskExecution.platform.get(id=first_exec).task_id
        ).count()
        == 1
    )


def test_a_50_item_map_over_joins_results_in_item_order(tenant, live_worker):
    tasks = [
        node(
            "list",
            handler={"type": "python", "callable": "echo"},
            parameters={"items": list(range(50))},
        ),
        node(
            "square",
            "list",
            handler={"type": "python", "callable": "echo"},
            map_over="list.result.items",
        ),
        node("total", "square"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks, timeout=120)
    assert run.status == "success", {n: (s.status, s.error_message) for n, s in nodes.items()}
    square = nodes["square"]
    assert square.map_total == 50 and square.map_finished == 50
    assert [r["item"] for r in square.result["results"]] == list(range(50))
    assert nodes["total"].result["upstream"]["square"]["results"][7] == {"item": 7}
    assert executions_of(run).filter(status="success").count() == 52


def test_a_lost_chord_callback_is_joined_by_the_reconciler(tenant, live_worker):
    """Shards whose join never arrives (as after a Redis restart) are joined from PostgreSQL."""
    from django.db import transaction

    from dags.engine.mapping import map_joins_reconcile
    from dags.models import DagNodeExecution

    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "lost-join",
            "tasks": [
                node("m", handler={"type": "python", "callable": "echo"}, map_over=[1, 2, 3])
            ],
        },
    )
    with transaction.atomic():
        run = dag_trigger(dag=dag)
        # Drop the chord (header and body) that would have been sent after commit ...
        transaction.get_connection().run_on_commit.clear()
    # ... and ring the shards' doorbells without a chord: nobody will call the join.
    from scheduler_app.ringing.doorbell import Doorbell
    from scheduler_app.ringing.ring import ring

    roots = DagNodeExecution.objects.filter(run=run).values_list("execution_root_id", flat=True)
    ring([Doorbell(str(r), str(tenant.id), "normal") for r in roots])
    wait_until(lambda: DagNodeState.objects.get(run=run, node_id="m").map_finished == 3, timeout=30)
    assert DagRun.platform.get(id=run.id).status == "running"
    assert map_joins_reconcile(grace_seconds=0) == 1
    run.refresh_from_db()
    assert run.status == "success"
    result = DagNodeState.objects.get(run=run, node_id="m").result
    assert [r["item"] for r in result["results"]] == [1, 2, 3]


def test_the_beat_leader_fires_a_scheduled_dag(tenant, live_worker, beats):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "every-second",
            "schedule": {"type": "interval", "expression": "1s"},
            "catchup": "all",
            "tasks": [node("a"), node("b", "a")],
        },
    )
    beat = beats("dag-beat")
    try:
        wait_until(
            lambda: (
                DagRun.platform.filter(dag=dag, trigger="schedule", status="success").count() >= 2
            ),
            timeout=40,
            message="two scheduled DAG runs to succeed",
        )
    except AssertionError:
        print(dump_logs(beat, live_worker))
        raise
    times = sorted(DagRun.platform.filter(dag=dag).values_list("scheduled_at", flat=True))
    assert len(set(times)) == len(times)  # one run per fire
    assert all((b - a).total_seconds() == 1 for a, b in itertools.pairwise(times))


def test_the_beat_leader_fires_a_dag_only_inside_its_start_at_end_at_window(
    tenant, live_worker, beats
):
    # The beat's schedule engine fires DAGs from the task heap: the window means what it
    # means for a task (no fire before start_at, none after end_at). The beat is up and
    # following the change feed before the DAG exists, so a fire before start_at would show.
    beat = beats("dag-window")
    wait_for_beat_tick("dag-window", after=time.time(), timeout=60)
    start = timezone.now() + timedelta(seconds=1.5)
    end = start + timedelta(seconds=3)
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "windowed",
            "schedule": {"type": "interval", "expression": "1s"},
            "policy": {"catchup": "all", "start_at": start.isoformat(), "end_at": end.isoformat()},
            "tasks": [node("a")],
        },
    )
    expected, moment = [], start - timedelta(microseconds=1)
    while (moment := schedule_of(dag).next_after(moment)) is not None:
        expected.append(moment)
    assert 3 <= len(expected) <= 4
    try:
        wait_until(
            lambda: DagRun.platform.filter(dag=dag, scheduled_at=expected[-1]).exists(),
            timeout=40,
            message="the window's last fire",
        )
        # The beat goes on ticking past end_at: a tick begun after the next fire would have
        # been due (a second after the last) fires nothing.
        wait_for_beat_tick("dag-window", after=expected[-1].timestamp() + 1.5)
    except AssertionError:
        print(dump_logs(beat, live_worker))
        raise
    times = sorted(DagRun.platform.filter(dag=dag).values_list("scheduled_at", flat=True))
    assert times == expected
    dag.refresh_from_db()
    assert dag.next_fire_at is None


@pytest.mark.needs_os_tool("bubblewrap")
def test_map_over_with_a_retried_shard_and_a_failed_shard(tenant, live_worker, beats):
    # Shard 1 succeeds at once (settled as a chord member), shard 2 succeeds on its retry
    # (outside the chord: it joins itself), shard 3 fails on both attempts.
    beats("map-retries")
    script = (
        "import json, os, sys; item = json.loads(os.environ['TASK_PARAMETERS'])['item']; "
        "attempt = int(os.environ['TASK_ATTEMPT']); "
        "sys.exit(0 if item == 1 or (item == 2 and attempt >= 2) else 3)"
    )
    tasks = [
        node("start"),
        node(
            "shards",
            "start",
            handler={"type": "shell", "command": ["python3", "-c", script]},
            map_over=[1, 2, 3],
            retry_policy={"max_attempts": 2, "backoff": "fixed", "base_delay_seconds": 0},
        ),
        node("after", "shards"),
    ]
    run, nodes = run_dag(tenant, live_worker, tasks, timeout=120)
    shards = nodes["shards"]
    assert shards.status == "failed" and shards.map_finished == 3
    assert shards.result["failed"] == 1 and len(shards.result["results"]) == 3
    assert nodes["after"].status == "upstream_failed"
    assert run.status == "partially_completed"
    attempts = sorted(
        (e.parameters["item"], e.attempt, e.status)
        for e in executions_of(run).exclude(parameters__isnull=True)
        if "item" in e.parameters
    )
    assert attempts == [
        (1, 1, "success"),
        (2, 1, "failed"),
        (2, 2, "success"),
        (3, 1, "failed"),
        (3, 2, "failed"),
    ]
