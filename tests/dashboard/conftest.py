from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from alerting.services.channels import channel_create
from alerting.services.incidents import incident_open
from dags.services.backfills import backfill_create
from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution
from scheduler_app.services.invitations import invitation_create
from tests.factories import make_task


@pytest.fixture
def signed_in(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


def add_execution(
    task,
    *,
    minutes_ago: float,
    status: str,
    lag: float = 0.2,
    duration: float = 1.0,
    error_class: str = "",
    attempt: int = 1,
    root=None,
    dead_lettered=False,
):
    """A finished (or running) execution row as the services would leave it."""
    scheduled = timezone.now() - timedelta(minutes=minutes_ago)
    started = scheduled + timedelta(seconds=lag) if status != ExecutionStatus.QUEUED else None
    finished = status not in (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)
    execution = TaskExecution.objects.create(
        tenant_id=task.tenant_id,
        task=task,
        status=status,
        scheduled_at=scheduled,
        queued_at=scheduled,
        started_at=started,
        completed_at=started + timedelta(seconds=duration) if finished and started else None,
        attempt=attempt,
        max_attempts=3,
        root_execution_id=root,
        worker_id="celery@w1" if started else "",
        error_class=error_class,
        error_message=f"boom ({error_class})" if error_class else "",
        result={"ok": True} if status == ExecutionStatus.SUCCESS else None,
        dead_lettered=dead_lettered,
        dead_lettered_at=timezone.now() if dead_lettered else None,
    )
    if root is None:
        TaskExecution.platform.filter(id=execution.id).update(root_execution_id=execution.id)
        execution.root_execution_id = execution.id
    return execution


@pytest.fixture
def busy_task(tenant):
    """A minutely task with a history: successes, failures of two classes, a dead letter."""
    task = make_task(
        tenant,
        name="minutely-sync",
        schedule={"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
    )
    for i in range(6):
        add_execution(task, minutes_ago=30 - i, status=ExecutionStatus.SUCCESS, lag=0.1 * i)
    first = add_execution(
        task, minutes_ago=20, status=ExecutionStatus.FAILED, error_class="timeout"
    )
    add_execution(
        task,
        minutes_ago=19.5,
        status=ExecutionStatus.FAILED,
        error_class="http_5xx",
        attempt=2,
        root=first.id,
    )
    add_execution(
        task,
        minutes_ago=19,
        status=ExecutionStatus.FAILED,
        error_class="http_5xx",
        attempt=3,
        root=first.id,
        dead_lettered=True,
    )
    return task


NOOP = {"type": "python", "callable": "noop"}
# a -> b -> c, d -> g, e -> f: the run below leaves b failed, c upstream_failed, g skipped
# (its condition did not hold), e running and f waiting for it.
PIPELINE = {
    "dag": "etl-pipeline",
    "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "UTC"},
    "tasks": [
        {"id": "a", "handler": NOOP},
        {"id": "b", "handler": NOOP, "depends_on": ["a"]},
        {"id": "c", "handler": NOOP, "depends_on": ["b"]},
        {"id": "d", "handler": NOOP},
        {"id": "e", "handler": NOOP},
        {"id": "f", "handler": NOOP, "depends_on": ["e"]},
        {"id": "g", "handler": NOOP, "depends_on": ["d"]},
    ],
}
# node -> (status, seconds after the run start it was dispatched, seconds it took or None)
RUN_STATES = {
    "a": ("success", 0.0, 2.0),
    "b": ("failed", 2.1, 3.0),
    "c": ("upstream_failed", None, None),
    "d": ("success", 0.0, 1.0),
    "e": ("running", 0.0, None),
    "f": ("waiting", None, None),
    "g": ("skipped", None, None),
}


def make_dag(tenant, raw=PIPELINE):
    from dags.services.definitions import dag_create

    return dag_create(tenant=tenant, raw=raw)


# The same run, ended: b failed, c never started (upstream_failed); what a re-run starts from.
ENDED_RUN_STATES = {**RUN_STATES, "e": ("success", 0.0, 1.5), "f": ("success", 1.6, 0.5)}


def make_dag_run(dag, states=RUN_STATES, *, started_seconds_ago: float = 30.0):
    """A run of `dag` with the node states given, written as the engine would leave them:
    node executions (trigger 'dag') linked to their nodes. Nothing is dispatched."""
    from dags.models import DagNodeExecution, DagNodeState, DagRun
    from dags.services.definitions import current_version

    version = current_version(dag)
    start = timezone.now() - timedelta(seconds=started_seconds_ago)
    active = {"waiting", "pending", "queued", "running"}
    run = DagRun.objects.create(
        tenant_id=dag.tenant_id,
        dag=dag,
        version=version,
        status="running",
        scheduled_at=start,
        started_at=start,
        created_at=start,
        remaining_nodes=sum(1 for status, *_ in states.values() if status in active),
    )
    for node_id, (status, offset, took) in states.items():
        execution_id = None
        dispatched = start + timedelta(seconds=offset) if offset is not None else None
        ended = dispatched + timedelta(seconds=took) if dispatched and took is not None else None
        if status not in active and ended is None:
            ended = start + timedelta(seconds=5)
        if dispatched is not None:
            execution_id = _node_execution(
                run, version.node_tasks[node_id], node_id, status, dispatched, ended
            )
            DagNodeExecution.objects.create(
                execution_root_id=execution_id, run=run, node_id=node_id, status=status
            )
        DagNodeState.objects.create(
            run=run,
            node_id=node_id,
            status=status,
            execution_id=execution_id,
            attempts=1 if dispatched else 0,
            started_at=dispatched,
            completed_at=ended,
            error_message="ValueError: boom" if status == "failed" else "",
        )
    return run


def _node_execution(run, task_id, node_id, status, dispatched, ended):
    execution = TaskExecution.objects.create(
        tenant_id=run.tenant_id,
        task_id=task_id,
        status=status,
        trigger="dag",
        scheduled_at=dispatched,
        queued_at=dispatched,
        started_at=dispatched + timedelta(milliseconds=200),
        completed_at=ended,
        attempt=1,
        max_attempts=1,
        worker_id="celery@w1",
        error_message="ValueError: boom" if status == "failed" else "",
    )
    TaskExecution.platform.filter(id=execution.id).update(root_execution_id=execution.id)
    return execution.id


def live_log_end(sink, *, status: str) -> None:
    """What the worker does for the live tail once the final status is committed: the
    unsent lines and the end marker, in one round trip to the live-log Redis."""
    from workers.live_logs import live_tails_close

    live_tails_close([(sink, status)])


@pytest.fixture
def world(tenant):
    """One object of every kind a dashboard route names, in the tenant; ids by parameter."""
    task = make_task(tenant, name="hourly-import")
    queued = add_execution(task, minutes_ago=0, status=ExecutionStatus.QUEUED)
    dead = add_execution(
        task, minutes_ago=5, status=ExecutionStatus.FAILED, error_class="boom", dead_lettered=True
    )
    channel = channel_create(
        tenant=tenant, name="ops-hook", kind="webhook", url="https://hooks.example.com/x"
    )
    backfill = backfill_create(
        tenant=tenant,
        task=make_task(
            tenant,
            name="backfilled",
            schedule={"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
        ),
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=datetime(2026, 11, 1, 4, tzinfo=UTC),
        max_parallel=1,
    )
    dag = make_dag(tenant)
    run = make_dag_run(dag)
    invitation = invitation_create(tenant=tenant, role="admin", link_for=str).invitation
    incident = incident_open(
        rule="task_failing", key=str(task.id), tenant=tenant, summary="hourly-import is failing"
    )
    return {
        "incident_id": str(incident.id),
        "invitation_id": str(invitation.id),
        "task_id": str(task.id),
        "execution_id": str(queued.id),
        "dead_letter_id": str(dead.id),
        "channel_id": str(channel.id),
        "backfill_id": str(backfill.id),
        "dag_id": str(dag.id),
        "run_id": str(run.id),
        # A node of the run that is no approval: deciding it is refused with a message.
        "node_id": run.nodes.order_by("id").first().node_id,
    }
