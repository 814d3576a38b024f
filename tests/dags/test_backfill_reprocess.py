"""A backfill's reprocess policy on real PostgreSQL: `none` leaves recorded fires alone,
`failed` runs again the ones whose run did not succeed, `all` every ended one; a run still
going is never touched. Running a fire again never duplicates it: a task's fire gets one more
execution at the same time (the unique key holds, the beat's later fire of that instant
records nothing), a DAG's fire keeps its one run. The re-runs are released under the same
max_parallel as new runs, and the dry run says what each fire would get."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from dags.engine.completion import node_complete, node_complete_locking
from dags.engine.state import run_lock
from dags.models import Backfill, BackfillRun, DagNodeState, DagRun
from dags.services.backfill_reprocess import task_fire_plans, task_fires_run_again
from dags.services.backfills import backfill_create, backfill_plan, backfills_advance
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import AuditEntry, TaskExecution
from scheduler_app.services.audit import audit_scope
from scheduler_app.services.executions import execution_next_attempt_or_dead_letter
from scheduler_app.services.firing import Fire, fires_record
from tests.factories import make_task

pytestmark = pytest.mark.django_db

HOURLY = {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def _at(hour: int) -> datetime:
    return DAY + timedelta(hours=hour)


def _record(task, hour: int, status: str, **more) -> TaskExecution:
    """A fire the scheduler recorded, ended `status`."""
    return TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status=status,
        trigger="schedule",
        scheduled_at=_at(hour),
        attempt=1,
        max_attempts=task.max_attempts,
        **more,
    )


@pytest.fixture
def task_with_history(tenant):
    """Fires 00..04: 00 none, 01 succeeded, 02 failed and dead-lettered, 03 still running,
    04 timed out."""
    task = make_task(tenant, schedule=HOURLY, retry_policy={"max_attempts": 2})
    recorded = {
        1: _record(task, 1, "success"),
        2: _record(task, 2, "failed", dead_lettered=True, dead_lettered_at=_at(2)),
        3: _record(task, 3, "running"),
        4: _record(task, 4, "timed_out"),
    }
    return task, recorded


def _backfill(task, reprocess, max_parallel=10, **target):
    return backfill_create(
        tenant=task.tenant if task else target["dag"].tenant,
        start=DAY,
        end=_at(5),
        max_parallel=max_parallel,
        reprocess=reprocess,
        **({"task": task} if task else target),
    )


def _outcomes(backfill) -> dict[int, str]:
    return {
        row.scheduled_at.hour: row.outcome for row in BackfillRun.objects.filter(backfill=backfill)
    }


def test_none_runs_only_the_fires_without_a_run(task_with_history):
    task, _ = task_with_history
    backfill = _backfill(task, "none")
    assert _outcomes(backfill) == {
        0: "new",
        1: "skipped_recorded",
        2: "skipped_recorded",
        3: "skipped_recorded",
        4: "skipped_recorded",
    }
    assert TaskExecution.platform.filter(task=task).count() == 5
    assert backfill.already_recorded == 4 and backfill.reprocessed == 0


def test_failed_runs_again_the_failed_fires_at_their_own_time_with_a_full_budget(
    task_with_history,
):
    task, recorded = task_with_history
    backfill = _backfill(task, "failed")
    assert _outcomes(backfill) == {
        0: "new",
        1: "skipped_succeeded",
        2: "rerun",
        3: "skipped_running",
        4: "rerun",
    }
    assert backfill.reprocessed == 2 and backfill.already_recorded == 2
    for hour in (2, 4):
        again = TaskExecution.platform.get(task=task, scheduled_at=_at(hour), attempt=2)
        assert again.trigger == "backfill" and again.status == "pending"
        assert again.retry_of_id == recorded[hour].id
        assert again.root_execution_id == again.id  # a chain of its own
        assert again.max_attempts == 1 + task.max_attempts  # the task's whole budget left
        run = BackfillRun.objects.get(backfill=backfill, scheduled_at=_at(hour))
        assert run.run_id == again.id
    recorded[2].refresh_from_db()
    assert recorded[2].dead_lettered is False  # run again: out of the dead-letter queue
    # One execution per (time, attempt): 5 recorded or new + 2 re-runs.
    assert TaskExecution.platform.filter(task=task).count() == 7


def test_a_fire_run_again_retries_with_the_tasks_whole_budget(task_with_history):
    task, _ = task_with_history
    _backfill(task, "failed")
    again = TaskExecution.platform.get(task=task, scheduled_at=_at(2), attempt=2)
    TaskExecution.platform.filter(id=again.id).update(status="failed")
    again.refresh_from_db()
    now = datetime.now(tz=UTC)
    with transaction.atomic():
        first = execution_next_attempt_or_dead_letter(
            execution=again, task=task, transient=True, now=now
        )
    assert first.next_attempt_id is not None and not first.dead_lettered
    retry = TaskExecution.platform.get(id=first.next_attempt_id)
    assert retry.attempt == 3 and retry.root_execution_id == again.id
    TaskExecution.platform.filter(id=retry.id).update(status="failed")
    retry.refresh_from_db()
    with transaction.atomic():
        last = execution_next_attempt_or_dead_letter(
            execution=retry, task=task, transient=True, now=now
        )
    assert last.dead_lettered  # two attempts: the task's max_attempts, no more, no fewer


def test_all_runs_every_ended_fire_again_and_never_a_running_one(task_with_history):
    task, _ = task_with_history
    backfill = _backfill(task, "all")
    assert _outcomes(backfill) == {
        0: "new",
        1: "rerun",
        2: "rerun",
        3: "skipped_running",
        4: "rerun",
    }
    assert TaskExecution.platform.filter(task=task, scheduled_at=_at(3)).count() == 1
    # Once more, with every fire ended: each gets the next attempt number at its time.
    TaskExecution.platform.filter(task=task).update(status="success")
    Backfill.platform.filter(id=backfill.id).update(status="completed")
    second = _backfill(task, "all")
    assert set(_outcomes(second).values()) == {"rerun"}
    attempts = TaskExecution.platform.filter(task=task, scheduled_at=_at(1)).values_list(
        "attempt", flat=True
    )
    assert sorted(attempts) == [1, 2, 3]


def test_the_beat_firing_a_run_again_instant_records_nothing_new(task_with_history):
    task, _ = task_with_history
    _backfill(task, "failed")
    before = TaskExecution.platform.filter(task=task).count()
    fires = [
        Fire(
            task_id=task.id,
            tenant_id=task.tenant_id,
            scheduled_at=_at(hour),
            priority=task.priority,
            queue="normal",
            max_attempts=task.max_attempts,
        )
        for hour in range(5)
    ]
    assert fires_record(fires, now=datetime.now(tz=UTC)) == []
    assert TaskExecution.platform.filter(task=task).count() == before


def test_two_re_runs_of_one_fire_at_once_insert_one(task_with_history):
    """Two backfills that both planned to run the failed fire again: the unique key lets one
    insert, the other inserts nothing (no duplicate-key error) and finds it running."""
    task, _ = task_with_history
    plans = task_fire_plans(task=task, fires=[_at(2)], policy="failed")
    assert task_fires_run_again(task=task, plans=plans).keys() == {_at(2)}
    assert task_fires_run_again(task=task, plans=plans) == {}
    assert TaskExecution.platform.filter(task=task, scheduled_at=_at(2)).count() == 2
    again = task_fire_plans(task=task, fires=[_at(2)], policy="failed")
    assert again[_at(2)].outcome == "skipped_running"


def test_re_runs_are_released_under_max_parallel_like_new_runs(tenant):
    task = make_task(tenant, schedule=HOURLY)
    for hour in range(4):
        _record(task, hour, "success")
    backfill = backfill_create(
        tenant=tenant, task=task, start=DAY, end=_at(4), max_parallel=1, reprocess="all"
    )
    waiting = TaskExecution.platform.filter(task=task, trigger="backfill")
    assert waiting.count() == 1
    assert backfills_advance() == 0  # its one slot is taken by the fire run again
    waiting.update(status="success")
    assert backfills_advance() == 1
    waiting.update(status="success")
    assert backfills_advance() == 1
    waiting.update(status="success")
    assert backfills_advance() == 1
    waiting.update(status="success")
    assert backfills_advance() == 0
    backfill.refresh_from_db()
    assert backfill.status == "completed" and backfill.reprocessed == 4
    assert sorted(waiting.values_list("scheduled_at__hour", flat=True)) == [0, 1, 2, 3]


def test_the_dry_run_says_what_each_fire_would_get_and_counts_them(task_with_history):
    task, _ = task_with_history
    plan = backfill_plan(task=task, start=DAY, end=_at(5), reprocess="failed")
    assert {at.hour: (p.outcome, p.was) for at, p in plan.plans.items()} == {
        0: ("new", None),
        1: ("skipped_succeeded", "success"),
        2: ("rerun", "failed"),
        3: ("skipped_running", "running"),
        4: ("rerun", "timed_out"),
    }
    assert plan.counts == {
        "new": 1,
        "rerun": 2,
        "skipped_succeeded": 1,
        "skipped_running": 1,
        "skipped_recorded": 0,
    }
    assert TaskExecution.platform.filter(task=task).count() == 4
    assert not Backfill.platform.exists()


def test_an_unknown_policy_is_refused_naming_reprocess_and_creates_nothing(task_with_history):
    task, _ = task_with_history
    for bad in ("sometimes", "", 1):
        with pytest.raises(ValidationFailed) as refused:
            backfill_create(tenant=task.tenant, task=task, start=DAY, end=_at(5), reprocess=bad)
        assert refused.value.field == "reprocess"
    assert not Backfill.platform.exists()
    assert TaskExecution.platform.filter(task=task).count() == 4


def test_the_backfills_audit_entry_records_its_policy(task_with_history):
    task, _ = task_with_history
    with audit_scope(actor="user:alice", via="api"):
        backfill = _backfill(task, "failed", max_parallel=3)
    entry = AuditEntry.platform.get(action="backfill.create", object_id=str(backfill.id))
    assert entry.detail["after"]["reprocess"] == "failed"
    assert entry.detail["after"]["max_parallel"] == 3


# --- DAG fires -------------------------------------------------------------------------------

NOOP = {"type": "python", "callable": "noop"}


@pytest.fixture
def chain_dag(tenant):
    return dag_create(
        tenant=tenant,
        raw={
            "dag": "nightly-chain",
            "schedule": HOURLY,
            "tasks": [
                {"id": "extract", "handler": NOOP},
                {"id": "load", "handler": NOOP, "depends_on": ["extract"]},
            ],
        },
    )


def _finish(run, node_id, status, callbacks):
    with callbacks(execute=True), transaction.atomic():
        if not node_complete_locking(
            run_id=run.id, version_id=run.version_id, node_id=node_id, status=status, result=None
        ):
            node_complete(run=run_lock(run.id), node_id=node_id, status=status, result=None)


def _dag_run(dag, hour, ends, callbacks) -> DagRun:
    """A scheduled run of the DAG at `hour`, driven through the engine: `ends` says how
    its nodes end, in order (a node not listed is left going)."""
    with callbacks(execute=True):
        run = dag_trigger(dag=dag, trigger="schedule", scheduled_at=_at(hour))
    for node_id, status in ends:
        _finish(run, node_id, status, callbacks)
    run.refresh_from_db()
    return run


def _nodes(run) -> dict[str, str]:
    return dict(DagNodeState.objects.filter(run=run).values_list("node_id", "status"))


@pytest.fixture
def dag_with_history(chain_dag, django_capture_on_commit_callbacks):
    """Fires 00..04: 00 none, 01 succeeded, 02 failed at load, 03 still running, 04 none."""
    callbacks = django_capture_on_commit_callbacks
    runs = {
        1: _dag_run(chain_dag, 1, [("extract", "success"), ("load", "success")], callbacks),
        2: _dag_run(chain_dag, 2, [("extract", "success"), ("load", "failed")], callbacks),
        3: _dag_run(chain_dag, 3, [], callbacks),
    }
    assert runs[1].status == "success" and runs[3].status == "running"
    assert runs[2].status in ("failed", "partially_completed")
    return chain_dag, runs


def test_a_dag_backfill_failed_re_runs_the_failed_nodes_inside_the_fires_run(
    dag_with_history, django_capture_on_commit_callbacks
):
    dag, runs = dag_with_history
    with django_capture_on_commit_callbacks(execute=True):
        backfill = _backfill(None, "failed", dag=dag)
    assert _outcomes(backfill) == {
        0: "new",
        1: "skipped_succeeded",
        2: "rerun",
        3: "skipped_running",
        4: "new",
    }
    # One run per fire time: the failed one runs again in place, load only.
    assert DagRun.platform.filter(dag=dag).count() == 5
    again = DagRun.platform.get(id=runs[2].id)
    assert again.status == "running"
    nodes = _nodes(again)
    assert nodes["extract"] == "success" and nodes["load"] in ("pending", "queued")
    assert BackfillRun.objects.get(backfill=backfill, scheduled_at=_at(2)).run_id == again.id
    assert _nodes(runs[1]) == {"extract": "success", "load": "success"}


def test_a_dag_backfill_all_clears_every_node_of_ended_runs_and_skips_running_ones(
    dag_with_history, django_capture_on_commit_callbacks
):
    dag, runs = dag_with_history
    with django_capture_on_commit_callbacks(execute=True):
        backfill = _backfill(None, "all", dag=dag)
    assert _outcomes(backfill) == {0: "new", 1: "rerun", 2: "rerun", 3: "skipped_running", 4: "new"}
    assert DagRun.platform.filter(dag=dag).count() == 5
    for hour in (1, 2):
        run = DagRun.platform.get(id=runs[hour].id)
        assert run.status == "running"
        nodes = _nodes(run)
        assert nodes["load"] == "waiting" and nodes["extract"] in ("pending", "queued")
    assert AuditEntry.platform.filter(action="dag_run.clear", object_id=str(runs[1].id)).exists()
    plan = backfill_plan(dag=dag, start=DAY, end=_at(5), reprocess="all")
    assert plan.counts["skipped_running"] == 5  # every fire's run is going now


def test_dag_re_runs_count_against_max_parallel(
    dag_with_history, django_capture_on_commit_callbacks
):
    dag, runs = dag_with_history
    with django_capture_on_commit_callbacks(execute=True):
        backfill = backfill_create(
            tenant=dag.tenant, dag=dag, start=_at(1), end=_at(3), max_parallel=1, reprocess="all"
        )
    # 01 run again takes the one slot; 02 waits for it.
    assert _outcomes(backfill) == {1: "rerun"}
    assert DagRun.platform.get(id=runs[2].id).status == runs[2].status  # not yet run again
    assert backfills_advance() == 0
    callbacks = django_capture_on_commit_callbacks
    for node_id in ("extract", "load"):
        _finish(runs[1], node_id, "success", callbacks)
    assert DagRun.platform.get(id=runs[1].id).status == "success"
    with callbacks(execute=True):
        assert backfills_advance() == 1
    assert _outcomes(backfill) == {1: "rerun", 2: "rerun"}
    assert DagRun.platform.get(id=runs[2].id).status == "running"
    assert DagRun.platform.filter(dag=dag).count() == 3


def test_a_dead_letter_retried_after_the_plan_looked_is_not_run_again_too(task_with_history):
    """The dead-lettered fire is planned to run again; an operator retries it from the DLQ
    before the release: the release finds the follow-up and leaves the fire to it."""
    from scheduler_app.services.dead_letters import dead_letter_fresh_run

    task, recorded = task_with_history
    plans = task_fire_plans(task=task, fires=[_at(2)], policy="failed")
    assert plans[_at(2)].outcome == "rerun"
    retried = dead_letter_fresh_run(execution=recorded[2])
    assert retried is not None
    assert task_fires_run_again(task=task, plans=plans) == {}
    assert not TaskExecution.platform.filter(task=task, trigger="backfill").exists()
    assert task_fire_plans(task=task, fires=[_at(2)], policy="failed")[_at(2)].outcome == (
        "skipped_running"
    )
