"""The scheduler engine driven directly, with a real Redis lock and a real database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from beat.engine import CHANGE_FEED_OVERLAP, EngineConfig
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.task_definitions import task_delete, task_pause, task_resume
from tests.beat_engines import engine_builder
from tests.factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=300,
    requeue_grace_seconds=60,
    housekeeping_seconds=1,
    lock_ttl_seconds=3,
)


@pytest.fixture
def make_engine(redis_client):
    with engine_builder(redis_client, CONFIG) as build:
        yield build


def _minutely_task_overdue(tenant, minutes: int, name: str = "minutely", catchup: str = "all"):
    task = make_task(
        tenant,
        name=name,
        schedule={"type": "cron", "expression": "* * * * *"},
        policy={"catchup": catchup},
    )
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    TaskDefinition.platform.filter(id=task.id).update(next_fire_at=start)
    return task


def test_missed_fires_inside_the_catchup_window_are_recorded_once_and_older_ones_dropped(
    tenant, make_engine
):
    task = _minutely_task_overdue(tenant, minutes=10)
    engine = make_engine("alpha")
    engine.tick()
    engine.tick()
    times = list(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))
    now = timezone.now()
    assert 5 <= len(times) <= 6
    assert len(set(times)) == len(times)
    assert all(now - timedelta(seconds=300) <= t <= now for t in times)
    task.refresh_from_db()
    assert task.next_fire_at > now and task.last_fired_at == max(times)


def test_only_the_leader_fires(tenant, make_engine):
    task = _minutely_task_overdue(tenant, minutes=3)
    leader, standby = make_engine("alpha"), make_engine("beta")
    leader.tick()
    standby.tick()
    assert leader.lock.is_held() and not standby.lock.is_held()
    assert standby.fired_total == 0
    assert TaskExecution.platform.filter(task=task).count() == leader.fired_total
    assert leader.fired_total in (4, 5)  # 5 if a minute boundary passed meanwhile


def test_a_leader_whose_lock_was_taken_stops_firing(tenant, make_engine, redis_client):
    engine = make_engine("alpha")
    engine.tick()
    assert engine.lock.is_held()
    redis_client.set(engine.lock.lock_key, "someone-else", px=3000)  # expired and re-taken
    assert engine.lock.renew() is False
    assert not engine.lock.is_held()
    task = _minutely_task_overdue(tenant, minutes=2)
    engine.tick()
    assert TaskExecution.platform.filter(task=task).count() == 0


def test_a_lock_holder_releasing_lets_the_standby_take_over_with_a_higher_epoch(make_engine):
    first, second = make_engine("alpha"), make_engine("beta")
    first.tick()
    second.tick()
    epoch = first.lock.epoch
    first.lock.release()
    second.tick()
    assert second.lock.is_held() and second.lock.epoch == epoch + 1


def test_the_change_feed_adds_pauses_resumes_and_deletes_without_a_reload(tenant, make_engine):
    engine = make_engine("alpha")
    assert len(engine.heap) == 0
    task = make_task(tenant, name="hourly", schedule={"type": "cron", "expression": "0 * * * *"})
    engine.tick()
    assert task.id in engine.heap
    task_pause(task=task)
    engine.tick()
    assert task.id not in engine.heap
    task_resume(task=task)
    engine.tick()
    assert task.id in engine.heap
    task_delete(task=task)
    engine.tick()
    assert task.id not in engine.heap


def test_manual_and_disabled_tasks_are_never_in_the_heap(tenant, make_engine):
    make_task(tenant, name="manual", schedule={"type": "manual"})
    make_task(tenant, name="off", enabled=False)
    engine = make_engine("alpha")
    assert len(engine.heap) == 0


def test_a_standby_moves_its_heap_along_behind_a_live_leader(tenant, make_engine):
    task = _minutely_task_overdue(tenant, minutes=30)
    leader, standby = make_engine("alpha"), make_engine("beta")
    leader.tick()
    standby.tick()
    entry = standby.heap.get(task.id)
    horizon = timezone.now() - timedelta(seconds=2 * CONFIG.lock_ttl_seconds)
    # Everything older than two lock TTLs is the live leader's; the standby skipped it.
    assert entry.next_fire_at > horizon - timedelta(minutes=1)
    assert standby.fired_total == 0


def test_load_computes_each_shared_schedule_once_and_leaves_the_collector_on(tenant, make_engine):
    import gc

    from scheduler_app.task_schedule import schedule_of_task

    tasks = [
        make_task(
            tenant, name=f"shared-{i}", schedule={"type": "cron", "expression": "*/5 * * * *"}
        )
        for i in range(3)
    ]
    jittered = make_task(
        tenant,
        name="jittered",
        schedule={"type": "cron", "expression": "*/5 * * * *"},
        policy={"jitter_seconds": 30},
    )
    TaskDefinition.platform.update(next_fire_at=None)  # the worst case: computed at load
    before = timezone.now()
    engine = make_engine("loader")
    assert gc.isenabled()
    for task in [*tasks, jittered]:
        task.refresh_from_db()
        expected = schedule_of_task(task).next_after(before)
        entry = engine.heap.get(task.id)
        # The load's `now` is a moment after `before`: the same fire unless a boundary passed.
        assert entry.next_fire_at >= expected
        assert entry.next_fire_at - expected < timedelta(minutes=6)
    shared = {engine.heap.get(task.id).next_fire_at for task in tasks}
    assert len(shared) == 1
    # The jittered task keeps its own (task-seeded) offset rather than the shared instant.
    assert engine.heap.get(jittered.id).schedule is not engine.heap.get(tasks[0].id).schedule


def test_the_change_feed_window_moves_on_with_the_clock_and_still_catches_late_commits(
    tenant, make_engine
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    bulk = [make_task(tenant, name=f"bulk-{i}") for i in range(20)]
    engine = make_engine("feed")  # loads: the bulk import is inside the re-read overlap
    start = timezone.now()
    assert engine.follow_changes(now=start) == 0  # already applied at load: not fetched again
    # Once the overlap has passed, the import is out of the window: nothing is read at all.
    later = start + timedelta(seconds=6)
    engine.follow_changes(now=later)
    with CaptureQueriesContext(connection) as queries:
        assert engine.follow_changes(now=later + timedelta(seconds=6)) == 0
    assert len(queries.captured_queries) == 1  # the window query alone: nothing fetched whole
    # and the window itself no longer holds the import
    window_start = engine._change_cursor - CHANGE_FEED_OVERLAP
    assert not TaskDefinition.platform.filter(changed_at__gte=window_start).exists()
    # A change stamped before the last poll but committed after it is still caught.
    poll = later + timedelta(seconds=6)
    late = bulk[0]
    TaskDefinition.platform.filter(id=late.id).update(
        paused=True, changed_at=poll - timedelta(seconds=3)
    )
    assert engine.follow_changes(now=poll + timedelta(seconds=1)) == 1
    assert late.id not in engine.heap


def test_a_standby_shadows_up_to_the_leaders_fired_through_mark(tenant, make_engine):
    """With the leader's mark, a standby's heap stands where the leader's does, so a takeover
    owes only what came after it (without it, two lock TTLs of fires)."""
    task = make_task(tenant, name="secondly", schedule={"type": "interval", "expression": "1s"})
    leader, standby = make_engine("alpha"), make_engine("beta")
    leader.tick()
    standby.tick()
    mark = leader.lock.fired_through()
    assert mark is not None and timezone.now() - mark < timedelta(seconds=CONFIG.lock_ttl_seconds)
    # The standby's next fire for the task is past the mark, not two TTLs behind now.
    assert standby.heap.get(task.id).next_fire_at > mark
    # Killed here, the leader's successor records nothing the leader had already recorded.
    recorded = TaskExecution.platform.filter(task=task).count()
    leader.lock._stop.set()
    leader.lock._redis.delete(leader.lock.lock_key)
    standby.tick()
    assert standby.lock.is_held()
    times = list(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))
    assert len(times) == len(set(times)) >= recorded


def test_a_takeover_rings_a_batch_its_predecessor_recorded_during_the_standbys_tick(
    tenant, make_engine, monkeypatch
):
    """The predecessor records a batch after the standby's tick began, and dies before
    ringing it; the standby then takes the lock in the same tick. The republish window ends
    at the takeover, not at the tick's start, so those rows are rung at once."""
    task = make_task(tenant, name="by-hand", schedule={"type": "manual"})
    old, new = make_engine("alpha"), make_engine("beta")
    old.tick()
    assert old.lock.is_held()
    recorded = []
    take_lock = new.lock.try_acquire

    def predecessor_records_then_dies():
        recorded.append(
            TaskExecution.objects.create(
                task=task,
                tenant=tenant,
                scheduled_at=timezone.now(),
                status="queued",
                queued_at=timezone.now(),
                queue="normal",
            )
        )
        old.lock._stop.set()
        old.lock._redis.delete(old.lock.lock_key)
        return take_lock()

    monkeypatch.setattr(new.lock, "try_acquire", predecessor_records_then_dies)
    published = new.published_total
    new.tick()
    assert new.lock.is_held() and recorded
    assert new.published_total == published + 1


def test_a_takeover_rings_again_a_fire_its_predecessor_committed_after_it(
    tenant, make_engine, monkeypatch
):
    """A leader SIGKILLed with its COMMIT on the wire: the rows land after the takeover's
    first republish pass, and the second pass rings them."""
    from beat import engine as engine_module

    monkeypatch.setattr(engine_module, "REPUBLISH_AGAIN_SECONDS", 0.0)
    task = make_task(tenant, name="by-hand", schedule={"type": "manual"})
    old, new = make_engine("alpha"), make_engine("beta")
    old.tick()
    old.lock._stop.set()
    old.lock._redis.delete(old.lock.lock_key)  # gone; its lock taken over at once
    new.tick()
    assert new.lock.is_held()
    published = new.published_total
    landed_late = TaskExecution.objects.create(
        task=task,
        tenant=tenant,
        scheduled_at=timezone.now() - timedelta(seconds=1),
        status="queued",
        queued_at=timezone.now() - timedelta(seconds=1),
        queue="normal",
    )
    new.tick()
    assert new.published_total == published + 1
    new.tick()
    assert new.published_total == published + 1  # one second pass, not one per tick
    landed_late.refresh_from_db()
    assert landed_late.status == "queued"
