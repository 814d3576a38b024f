"""`policy.remaining_runs: N`: exactly N more recorded fires, then the schedule pauses itself
with the record (paused_by "remaining_runs", a note, no next fire), counted in the fire's
transaction so that two schedulers that both lead spend one count per fire. The engine is
driven directly with an injected clock, a real Redis lock and a real database."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.firing import Fire, fires_record, next_fires_save
from scheduler_app.services.task_definitions import task_resume, task_trigger
from tests.api_clients import jwt_client
from tests.beat_engines import engine_builder
from tests.clock import ManualClock
from tests.factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=3600,
    requeue_grace_seconds=60,
    housekeeping_seconds=60,
    lock_ttl_seconds=3,
)
MINUTELY = {"type": "cron", "expression": "* * * * *"}


@pytest.fixture
def make_engine(redis_client):
    with engine_builder(redis_client, CONFIG) as build:
        yield build


def _limited(tenant, remaining: int, **policy) -> TaskDefinition:
    return make_task(
        tenant,
        name=f"limited-{uuid.uuid4().hex[:6]}",
        schedule=MINUTELY,
        policy={"remaining_runs": remaining, **policy},
    )


def _overdue(task, minutes: int):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    TaskDefinition.platform.filter(id=task.id).update(next_fire_at=start)
    return start


def _fire(task, at) -> Fire:
    return Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=at,
        priority=task.priority,
        queue="normal",
        max_attempts=1,
        overlap=task.overlap,
    )


def _runs(task) -> list:
    return list(
        TaskExecution.platform.filter(task=task, trigger="schedule")
        .order_by("scheduled_at")
        .values_list("scheduled_at", flat=True)
    )


def _assert_paused_by_the_count(task) -> None:
    task.refresh_from_db()
    assert task.paused and task.remaining_runs == 0 and task.next_fire_at is None
    assert task.paused_by == "remaining_runs" and task.paused_at is not None
    assert "policy.remaining_runs" in task.pause_note


def test_three_remaining_fire_exactly_three_times_on_the_clock_then_pause(tenant, redis_client):
    clock = ManualClock()
    lock = LeaderLock(
        redis_client, key_prefix=f"rr{uuid.uuid4().hex[:6]}:", node_id="alpha", ttl_seconds=60
    )
    engine = SchedulerEngine(lock=lock, config=CONFIG, clock=clock)
    task = _limited(tenant, 3)
    unlimited = make_task(tenant, name="unlimited", schedule=MINUTELY)
    try:
        engine.load()
        counts = []
        for _ in range(6):
            clock.advance(60)
            engine.tick()
            task.refresh_from_db()
            counts.append(task.remaining_runs)
        # One fire a minute: 2, 1, 0 left, then nothing more is recorded.
        assert counts == [2, 1, 0, 0, 0, 0]
        assert len(_runs(task)) == 3
        _assert_paused_by_the_count(task)
        assert task.pause_note.endswith(f"{_runs(task)[-1].isoformat().replace('+00:00', 'Z')})")
        # A task without the policy fires every minute and is never paused.
        unlimited.refresh_from_db()
        assert len(_runs(unlimited)) == 6 and not unlimited.paused
        assert unlimited.remaining_runs is None
    finally:
        lock.release()


def test_a_catch_up_burst_records_only_the_runs_left_in_one_batch(tenant, make_engine):
    task = _limited(tenant, 3, catchup="all")
    start = _overdue(task, 6)
    make_engine().tick()
    assert _runs(task) == [start + timedelta(minutes=m) for m in range(3)]
    _assert_paused_by_the_count(task)


def test_two_schedulers_that_both_lead_spend_one_count_per_fire(tenant, make_engine):
    task = _limited(tenant, 4, catchup="all")
    start = _overdue(task, 6)
    # Locks of their own: both believe they lead (a split brain), with the same heap.
    first, second = make_engine("alpha", own_lock=True), make_engine("beta", own_lock=True)
    first.tick()
    second.tick()
    assert first.leading and second.leading
    assert _runs(task) == [start + timedelta(minutes=m) for m in range(4)]
    _assert_paused_by_the_count(task)


def test_a_fire_another_scheduler_recorded_is_not_counted_again(tenant):
    """Scheduler A recorded T1; B, behind, records [T1, T2]: T1 is a no-op that spends
    nothing, so T2 is still allowed and spends the last count."""
    task = _limited(tenant, 2)
    t1 = timezone.now().replace(microsecond=0)
    t2 = t1 + timedelta(minutes=1)
    with transaction.atomic():
        assert len(fires_record([_fire(task, t1)], now=t1)) == 1
    task.refresh_from_db()
    assert task.remaining_runs == 1 and not task.paused
    with transaction.atomic():
        bells = fires_record([_fire(task, t1), _fire(task, t2)], now=t2)
    assert len(bells) == 1
    assert _runs(task) == [t1, t2]
    _assert_paused_by_the_count(task)


def test_concurrent_batches_on_two_connections_record_the_count_and_no_more(tenant):
    """Two schedulers record overlapping batches at the same instant, each on its own
    connection: the row lock makes them count one after the other."""
    task = _limited(tenant, 3)
    base = timezone.now().replace(microsecond=0)
    times = [base + timedelta(minutes=m) for m in range(5)]
    batches = [[_fire(task, at) for at in times], [_fire(task, at) for at in reversed(times)]]
    start, rung, errors = threading.Barrier(2), [], []

    def record(fires) -> None:
        try:
            start.wait()
            with transaction.atomic():
                rung.append(
                    len(fires_record(sorted(fires, key=lambda f: f.scheduled_at), now=base))
                )
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=record, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(rung) == 3
    assert _runs(task) == times[:3]
    _assert_paused_by_the_count(task)


def test_next_fires_saved_after_the_count_ran_out_leave_no_next_fire(tenant):
    task = _limited(tenant, 1)
    at = timezone.now().replace(microsecond=0)
    with transaction.atomic():
        fires_record([_fire(task, at)], now=at)
        next_fires_save([(task.id, at + timedelta(minutes=1), at)])
    task.refresh_from_db()
    assert task.next_fire_at is None and task.last_fired_at == at and task.paused


def test_a_fire_the_overlap_policy_skips_spends_nothing(tenant):
    task = _limited(tenant, 2, overlap="skip")
    TaskExecution.objects.create(
        tenant=tenant, task=task, status="running", scheduled_at=timezone.now() - timedelta(hours=1)
    )
    at = timezone.now().replace(microsecond=0)
    with transaction.atomic():
        fires_record([_fire(task, at), _fire(task, at + timedelta(minutes=1))], now=at)
    task.refresh_from_db()
    fired = TaskExecution.platform.filter(task=task, scheduled_at__gte=at)
    assert sorted(fired.values_list("status", flat=True)) == ["skipped", "skipped"]
    assert task.remaining_runs == 2 and not task.paused


def test_manual_triggers_do_not_count_and_a_resume_clears_a_spent_count(tenant, make_engine):
    task = _limited(tenant, 1, catchup="latest")
    task_trigger(task=task)
    task.refresh_from_db()
    assert task.remaining_runs == 1
    _overdue(task, 2)
    make_engine().tick()
    _assert_paused_by_the_count(task)
    resumed = task_resume(task=task)
    assert not resumed.paused and resumed.remaining_runs is None
    assert (resumed.paused_by, resumed.pause_note, resumed.paused_at) == ("", "", None)
    assert resumed.next_fire_at is not None


def test_the_api_shows_the_count_left_and_the_record(api, tenant, make_engine):
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "three-more",
            "schedule": MINUTELY,
            "handler": {"type": "python", "callable": "noop"},
            "policy": {"remaining_runs": 2, "catchup": "all"},
        },
        format="json",
    ).json()
    task = TaskDefinition.platform.get(id=created["id"])
    _overdue(task, 1)
    make_engine().tick()
    body = api.get(f"/api/v1/tasks/{task.id}").json()
    assert body["policy"]["remaining_runs"] == 0
    assert body["paused"] is True and body["paused_by"] == "remaining_runs"
    assert "policy.remaining_runs" in body["pause_note"] and body["next_fire_at"] is None


def test_the_probe_for_limited_tasks_reads_the_partial_index(tenant):
    """What keeps it cheap for tasks without the policy: the batch's probe reads an index
    that holds only the limited tasks (asserted on the plan, not on a timing)."""
    ids = [make_task(tenant, name=f"plain-{n}", schedule=MINUTELY).id for n in range(3)]
    table = TaskDefinition._meta.db_table
    # A test table is tiny, where a sequential scan is as good as any: the planner is told
    # not to, to show which index it picks (on a million tasks it picks it unprompted).
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            f"EXPLAIN SELECT id, remaining_runs FROM {table} "
            "WHERE remaining_runs IS NOT NULL AND id = ANY(%s::uuid[]) ORDER BY id FOR UPDATE",
            [ids],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "idx_task_remaining_runs" in plan, plan


def test_a_new_count_given_before_the_resume_is_kept(api, tenant, make_engine):
    task = _limited(tenant, 1, catchup="latest")
    _overdue(task, 1)
    make_engine().tick()
    _assert_paused_by_the_count(task)
    patched = api.patch(
        f"/api/v1/tasks/{task.id}", {"policy": {"remaining_runs": 2}}, format="json"
    ).json()
    assert patched["paused"] is True and patched["policy"]["remaining_runs"] == 2
    resumed = api.post(f"/api/v1/tasks/{task.id}/resume").json()
    assert resumed["paused"] is False and resumed["policy"]["remaining_runs"] == 2


def test_another_tenant_sees_and_changes_nothing_of_a_limited_task(tenant, tenant_factory):
    """The attacker from another tenant: the task is a 404 to read, pause or resume."""
    task = _limited(tenant, 3)
    _, intruder = tenant_factory("globex")
    attacker = jwt_client(intruder)
    assert attacker.get(f"/api/v1/tasks/{task.id}").status_code == 404
    assert attacker.post(f"/api/v1/tasks/{task.id}/resume").status_code == 404
    paused = attacker.post(f"/api/v1/tasks/{task.id}/pause", {"note": "x"}, format="json")
    assert paused.status_code == 404
    listed = attacker.get("/api/v1/tasks").json()["results"]
    assert all(item["id"] != str(task.id) for item in listed)
    task.refresh_from_db()
    assert task.remaining_runs == 3 and not task.paused


def test_the_schedule_preview_stops_at_the_runs_left(api, tenant):
    task = _limited(tenant, 3)
    preview = api.get(f"/api/v1/tasks/{task.id}/schedule-preview?count=10").json()
    assert len(preview["fire_times"]) == 3 and len(preview["timeline"]) == 3
    unlimited = make_task(tenant, name="unlimited", schedule=MINUTELY)
    assert (
        len(api.get(f"/api/v1/tasks/{unlimited.id}/schedule-preview?count=10").json()["fire_times"])
        == 10
    )
