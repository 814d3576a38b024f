"""DAG schedules in the schedule engine: catch-up, overlap, jitter, start/end and fire-once,
driven directly (the beat's engine with a real Redis lock and a real database, no beat
process). A DAG is an entry of the same heap as a task, so each policy is checked against a
task's where both can be fired side by side."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from beat.engine import EngineConfig
from dags.models import Dag, DagRun
from dags.services.definitions import dag_create, dag_delete, dag_set_paused, dag_update
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.shard_keys import shard_of
from scheduler_app.task_schedule import schedule_of
from tests.beat_engines import engine_builder
from tests.factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

H = {"type": "python", "callable": "noop"}
MINUTELY = {"type": "cron", "expression": "* * * * *", "timezone": "UTC"}

CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=3600,
    requeue_grace_seconds=60,
    housekeeping_seconds=60,
    lock_ttl_seconds=3,
)


@pytest.fixture
def make_engine(redis_client):
    with engine_builder(redis_client, CONFIG) as build:
        yield build


def make_dag(tenant, name: str = "minutely", schedule=None, **extra) -> Dag:
    raw = {"dag": name, "schedule": schedule or MINUTELY, "tasks": [{"id": "a", "handler": H}]}
    return dag_create(tenant=tenant, raw={**raw, **extra})


def overdue(model, row_id, minutes: int):
    """Pretend the scheduler was down: the next fire is `minutes` whole minutes ago."""
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    model.platform.filter(id=row_id).update(next_fire_at=start)
    return start


def run_times(dag) -> list:
    return sorted(
        DagRun.platform.filter(dag=dag, trigger="schedule").values_list("scheduled_at", flat=True)
    )


def execution_times(task) -> list:
    return sorted(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))


# -- catch-up ------------------------------------------------------------------------------
@pytest.mark.parametrize("catchup", ["all", "latest", "none"])
def test_a_dag_catches_up_exactly_as_a_task_with_the_same_policy(tenant, make_engine, catchup):
    dag = make_dag(tenant, policy={"catchup": catchup})
    task = make_task(tenant, name="twin", schedule=MINUTELY, policy={"catchup": catchup})
    start = overdue(Dag, dag.id, 3)
    overdue(TaskDefinition, task.id, 3)
    engine = make_engine()
    engine.tick()
    now = timezone.now()
    assert run_times(dag) == execution_times(task)
    times = run_times(dag)
    if catchup == "all":  # -3, -2, -1 and 0 minutes (and the next, had a minute passed)
        assert times[:4] == [start + timedelta(minutes=m) for m in range(4)]
    elif catchup == "latest":
        assert len(times) == 1
    else:
        assert all(t >= now - CONFIG.late_grace - timedelta(seconds=1) for t in times)
    dag.refresh_from_db()
    assert dag.next_fire_at > now - timedelta(seconds=1)
    assert dag.last_fired_at >= start + timedelta(minutes=3)


def test_the_top_level_catchup_spelling_still_works(tenant, make_engine):
    dag = make_dag(tenant, catchup="all", overlap="allow")
    start = overdue(Dag, dag.id, 3)
    make_engine().tick()
    assert run_times(dag)[:4] == [start + timedelta(minutes=m) for m in range(4)]


# -- fire once -----------------------------------------------------------------------------
@pytest.mark.parametrize("overlap", ["allow", "cancel_other"])
def test_a_fire_is_recorded_once_even_if_two_schedulers_both_lead(tenant, make_engine, overlap):
    dag = make_dag(tenant, policy={"catchup": "all", "overlap": overlap})
    overdue(Dag, dag.id, 2)
    # Two engines with locks of their own: both believe they lead (a split brain).
    first, second = make_engine("alpha", own_lock=True), make_engine("beta", own_lock=True)
    first.tick()
    second.tick()
    assert first.leading and second.leading
    runs = DagRun.platform.filter(dag=dag)
    times = list(runs.values_list("scheduled_at", flat=True))
    assert len(times) >= 3 and len(set(times)) == len(times)
    if overlap == "cancel_other":
        # The second leader did not take the first's run of the same fire for an overlap.
        assert runs.order_by("-scheduled_at").first().status == "running"


# -- overlap -------------------------------------------------------------------------------
def test_overlap_skip_buffer_one_and_cancel_other(tenant, make_engine):
    skip = make_dag(tenant, "skip", policy={"catchup": "all", "overlap": "skip"})
    buffered = make_dag(tenant, "buffered", policy={"catchup": "all", "overlap": "buffer_one"})
    cancel = make_dag(tenant, "cancel", policy={"catchup": "all", "overlap": "cancel_other"})
    for dag in (skip, buffered, cancel):
        overdue(Dag, dag.id, 3)
    make_engine().tick()
    # No worker: the first run never finishes. skip: the later fires of the burst add nothing;
    # buffer_one: one more waits queued, the rest add nothing; cancel_other: each fire ends
    # the run before it.
    assert list(DagRun.platform.filter(dag=skip).values_list("status", flat=True)) == ["running"]
    statuses = sorted(DagRun.platform.filter(dag=buffered).values_list("status", flat=True))
    assert statuses == ["queued", "running"]
    runs = list(DagRun.platform.filter(dag=cancel).order_by("scheduled_at"))
    assert len(runs) >= 4
    assert [r.status for r in runs] == ["cancelled"] * (len(runs) - 1) + ["running"]


# -- jitter and the active window ------------------------------------------------------------
def test_jitter_moves_each_dag_fire_within_its_bound_as_for_a_task(tenant, make_engine):
    dag = make_dag(tenant, policy={"catchup": "all", "jitter_seconds": 20})
    task = make_task(
        tenant, name="twin", schedule=MINUTELY, policy={"catchup": "all", "jitter_seconds": 20}
    )
    for definition in (dag, task):
        # The stored next fire is where a scheduler that went down left it: jittered too.
        start = overdue(type(definition), definition.id, 6)
        first = schedule_of(definition).next_after(start - timedelta(microseconds=1))
        type(definition).platform.filter(id=definition.id).update(next_fire_at=first)
    make_engine().tick()
    for definition, times in ((dag, run_times(dag)), (task, execution_times(task))):
        assert len(times) >= 5
        offsets = {(t - t.replace(second=0, microsecond=0)).total_seconds() for t in times}
        assert offsets <= set(range(21))
        # Each is the definition's own jittered instant (seeded by its id, on every node).
        schedule = schedule_of(definition)
        assert all(schedule.next_after(t - timedelta(microseconds=1)) == t for t in times)
    dag.refresh_from_db()
    assert dag.jitter_seconds == 20


def test_start_at_and_end_at_bound_a_dag_as_a_task(tenant, make_engine):
    minute = timezone.now().replace(second=0, microsecond=0)
    # A window already over: fires inside it that an outage left are owed, none after it.
    ended = {"catchup": "all", "end_at": (minute - timedelta(minutes=2)).isoformat()}
    dag = make_dag(tenant, "ended", policy=ended)
    task = make_task(tenant, name="ended-task", schedule=MINUTELY, policy=ended)
    # A window in the future: nothing fires before it opens.
    later = {"start_at": (minute + timedelta(hours=2, seconds=30)).isoformat()}
    future = make_dag(tenant, "later", policy=later)
    future_task = make_task(tenant, name="later-task", schedule=MINUTELY, policy=later)
    for model, row_id in ((Dag, dag.id), (TaskDefinition, task.id)):
        overdue(model, row_id, 4)
    engine = make_engine()
    assert engine.heap.get(future.id).next_fire_at == minute + timedelta(hours=2, minutes=1)
    assert engine.heap.get(future.id).next_fire_at == engine.heap.get(future_task.id).next_fire_at
    engine.tick()
    expected = [minute - timedelta(minutes=m) for m in (4, 3, 2)]
    assert run_times(dag) == execution_times(task) == expected
    assert not DagRun.platform.filter(dag=future).exists()
    assert dag.id not in engine.heap  # the schedule is over
    dag.refresh_from_db()
    assert dag.next_fire_at is None


def test_a_dag_policy_is_validated_as_a_tasks(tenant):
    bad = [
        ({"policy": {"jitter_seconds": 60}}, "policy.jitter_seconds"),  # not under the gap
        ({"policy": {"start_at": "tomorrow"}}, "policy.start_at"),
        ({"policy": {"colour": "red"}}, "policy.colour"),
        ({"policy": {"overlap": "queue"}}, "policy.overlap"),
        ({"catchup": "all", "policy": {"catchup": "none"}}, "policy.catchup"),
        (
            {"policy": {"start_at": "2026-01-02T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}},
            "policy.end_at",
        ),
    ]
    for extra, field in bad:
        with pytest.raises(ValidationFailed) as caught:
            make_dag(tenant, **extra)
        assert caught.value.field == field, extra
    assert not Dag.platform.exists()


# -- following changes, shards -------------------------------------------------------------
def test_the_engine_follows_dag_changes_without_a_reload(tenant, make_engine):
    engine = make_engine()
    hourly = {"type": "cron", "expression": "0 * * * *"}
    dag = make_dag(tenant, schedule=hourly)
    engine.tick()
    assert dag.id in engine.heap
    first = engine.heap.get(dag.id).next_fire_at
    updated_at = timezone.now()
    dag = dag_update(
        dag=dag,
        raw={
            "dag": dag.name,
            # Half past, jittered by up to 10 minutes: never the first fire's time (a jitter
            # alone could draw an offset of 0).
            "schedule": {"type": "cron", "expression": "30 * * * *"},
            "tasks": [{"id": "b", "handler": H}],
            "policy": {"jitter_seconds": 600},
        },
    )
    engine.tick()
    # The new version moves the fire off the hour: the entry follows it.
    dag.refresh_from_db()
    assert engine.heap.get(dag.id).next_fire_at == dag.next_fire_at != first
    # (The jittered fire of the hour under way may still be ahead: the first fire after the
    # update, not the next hour's.)
    assert dag.next_fire_at == schedule_of(dag).next_after(updated_at)
    dag = dag_set_paused(dag=dag, paused=True)
    engine.tick()
    assert dag.id not in engine.heap
    dag = dag_set_paused(dag=dag, paused=False)
    engine.tick()
    assert dag.id in engine.heap
    dag_delete(dag=dag)
    engine.tick()
    assert dag.id not in engine.heap


def test_each_dag_belongs_to_one_shard_as_a_task_does(tenant, make_engine):
    dags = [make_dag(tenant, f"sharded-{i}") for i in range(6)]
    shards = [make_engine(f"shard-{i}", shard=(i, 2)) for i in range(2)]
    for dag in dags:
        holders = [i for i, engine in enumerate(shards) if dag.id in engine.heap]
        assert holders == [shard_of(dag.id, 2)]


def test_paused_dags_do_not_fire_and_resume_does_not_burst(tenant, make_engine):
    dag = make_dag(tenant, policy={"catchup": "all"})
    overdue(Dag, dag.id, 4)
    dag = dag_set_paused(dag=dag, paused=True)
    assert dag.next_fire_at is None
    engine = make_engine()
    engine.tick()
    assert not DagRun.platform.filter(dag=dag).exists()
    dag = dag_set_paused(dag=dag, paused=False)
    assert dag.next_fire_at > timezone.now()
    engine.tick()
    assert DagRun.platform.filter(dag=dag).count() <= 1
