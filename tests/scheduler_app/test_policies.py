"""Per-task scheduling policies, one by one: catch-up, overlap, jitter, active window, resume."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from beat.policies import catchup_select
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.firing import due_pending_promote
from scheduler_app.services.task_definitions import task_pause, task_resume, task_update
from schedules import parse_schedule
from schedules.shaping import JitteredSchedule, WindowedSchedule
from tests.factories import make_task

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=8)
WINDOW = timedelta(seconds=300)


def _minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


# -- catch-up (pure) -----------------------------------------------------------------
def test_catchup_all_records_every_missed_fire_inside_the_window():
    owed = _minutes(-10, -4, -3, -2, -1)
    assert catchup_select(owed, policy="all", now=T0, late_grace=GRACE, window=WINDOW) == owed[1:]


def test_catchup_latest_records_only_the_last_missed_fire():
    owed = _minutes(-4, -3, -2, -1)
    chosen = catchup_select(owed, policy="latest", now=T0, late_grace=GRACE, window=WINDOW)
    assert chosen == _minutes(-1)


def test_catchup_latest_adds_nothing_when_a_fire_is_on_time():
    owed = [*_minutes(-3, -2, -1), T0 - timedelta(seconds=2)]
    chosen = catchup_select(owed, policy="latest", now=T0, late_grace=GRACE, window=WINDOW)
    assert chosen == [T0 - timedelta(seconds=2)]


def test_catchup_none_drops_missed_fires_but_keeps_late_ones_a_failover_owes():
    owed = [*_minutes(-3, -2, -1), T0 - timedelta(seconds=2)]
    chosen = catchup_select(owed, policy="none", now=T0, late_grace=GRACE, window=WINDOW)
    assert chosen == [T0 - timedelta(seconds=2)]


# -- jitter and window (pure) -----------------------------------------------------------
def test_jitter_is_deterministic_bounded_and_increasing():
    minutely = parse_schedule(schedule_type="cron", expression="* * * * *", timezone="UTC")
    first = JitteredSchedule(minutely, 20, "task-a")
    again = JitteredSchedule(minutely, 20, "task-a")
    moment, fires = T0, []
    for _ in range(50):
        moment = first.next_after(moment)
        fires.append(moment)
    assert fires == sorted(set(fires))
    offsets = {(f - f.replace(second=0)).total_seconds() for f in fires}
    assert offsets <= set(range(21)) and len(offsets) > 5
    assert [again.next_after(f - timedelta(microseconds=1)) for f in fires] == fires


def test_window_bounds_the_first_and_last_fire():
    hourly = parse_schedule(schedule_type="cron", expression="0 * * * *", timezone="UTC")
    windowed = WindowedSchedule(hourly, T0 + timedelta(minutes=90), T0 + timedelta(hours=3))
    assert windowed.next_after(T0) == T0 + timedelta(hours=2)
    assert windowed.next_after(T0 + timedelta(hours=2)) == T0 + timedelta(hours=3)
    assert windowed.next_after(T0 + timedelta(hours=3)) is None


# -- validation and storage ---------------------------------------------------------------
@pytest.mark.django_db
def test_policies_default_to_latest_and_allow(tenant):
    task = make_task(tenant)
    assert (task.catchup, task.overlap, task.jitter_seconds) == ("latest", "allow", 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"catchup": "some"}, "policy.catchup"),
        ({"overlap": "queue"}, "policy.overlap"),
        ({"jitter_seconds": -1}, "policy.jitter_seconds"),
        ({"jitter_seconds": 60}, "policy.jitter_seconds"),  # not less than a minutely gap
        ({"start_at": "tomorrow"}, "policy.start_at"),
        ({"start_at": "2026-01-02T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}, "policy.end_at"),
        ({"colour": "red"}, "policy.colour"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(tenant, policy, field):
    with pytest.raises(ValidationFailed) as caught:
        make_task(tenant, schedule={"type": "cron", "expression": "* * * * *"}, policy=policy)
    assert caught.value.field == field
    assert not TaskDefinition.platform.exists()


@pytest.mark.django_db
def test_start_at_defers_the_first_fire_and_end_at_ends_the_schedule(tenant):
    start = timezone.now() + timedelta(days=2)
    task = make_task(
        tenant,
        schedule={"type": "cron", "expression": "0 * * * *"},
        policy={"start_at": start.isoformat(), "end_at": (start + timedelta(hours=5)).isoformat()},
    )
    assert task.next_fire_at >= start
    assert task.next_fire_at < start + timedelta(hours=1)
    task_update(task=task, spec={"policy": {"end_at": None, "start_at": None}}, partial=True)
    task.refresh_from_db()
    assert task.next_fire_at <= timezone.now() + timedelta(hours=1)


@pytest.mark.django_db
def test_the_api_reads_and_writes_the_policy_object(api):
    body = {
        "name": "api-policy",
        "schedule": {"type": "cron", "expression": "*/5 * * * *"},
        "handler": {"type": "python", "callable": "noop"},
        "policy": {"catchup": "all", "overlap": "skip", "jitter_seconds": 30},
    }
    created = api.post("/api/v1/tasks", body, format="json")
    assert created.status_code == 201, created.content
    policy = created.json()["policy"]
    assert policy == {
        "catchup": "all",
        "overlap": "skip",
        "jitter_seconds": 30,
        "start_at": None,
        "end_at": None,
        "pause_after_failures": None,
        "health_check": None,
        "remaining_runs": None,
    }
    bad = api.post(
        "/api/v1/tasks", {**body, "name": "x", "policy": {"overlap": "nope"}}, format="json"
    )
    assert bad.status_code == 400 and "policy" in str(bad.json())


# -- in the engine (real Redis lock, real database) ------------------------------------------
CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=300,
    requeue_grace_seconds=60,
    housekeeping_seconds=60,
    lock_ttl_seconds=3,
)


@pytest.fixture
def engine(redis_client, transactional_db):
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    lock = LeaderLock(redis_client, key_prefix=prefix, node_id="alpha", ttl_seconds=3)
    built = SchedulerEngine(lock=lock, config=CONFIG)
    yield built
    lock.release()


def _overdue_minutely(tenant, *, minutes: int, **policy):
    task = make_task(
        tenant,
        name=f"minutely-{uuid.uuid4().hex[:6]}",
        schedule={"type": "cron", "expression": "* * * * *"},
        policy=policy,
    )
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    TaskDefinition.platform.filter(id=task.id).update(next_fire_at=start)
    return task


def _statuses(task) -> list[str]:
    return list(
        TaskExecution.platform.filter(task=task)
        .order_by("scheduled_at")
        .values_list("status", flat=True)
    )


def test_catchup_latest_after_an_outage_runs_once(tenant, engine):
    task = _overdue_minutely(tenant, minutes=4, catchup="latest")
    engine.load()
    engine.tick()
    assert TaskExecution.platform.filter(task=task).count() == 1


def test_catchup_none_after_an_outage_runs_nothing_old(tenant, engine):
    task = _overdue_minutely(tenant, minutes=4, catchup="none")
    engine.load()
    engine.tick()
    grace = CONFIG.late_grace
    times = TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True)
    assert all(t >= timezone.now() - grace for t in times)
    task.refresh_from_db()
    assert task.next_fire_at > timezone.now()


def _running_run(task):
    return TaskExecution.objects.create(
        tenant=task.tenant,
        task=task,
        status="running",
        scheduled_at=timezone.now() - timedelta(hours=1),
    )


def test_overlap_skip_records_fires_as_skipped_while_a_run_is_active(tenant, engine):
    task = _overdue_minutely(tenant, minutes=3, catchup="all", overlap="skip")
    _running_run(task)
    engine.load()
    engine.tick()
    statuses = _statuses(task)
    assert statuses.count("running") == 1
    assert set(statuses) == {"running", "skipped"} and len(statuses) >= 4
    assert engine.published_total == 0


def test_overlap_skip_runs_one_of_a_burst_when_nothing_is_active(tenant, engine):
    task = _overdue_minutely(tenant, minutes=3, catchup="all", overlap="skip")
    engine.load()
    engine.tick()
    statuses = _statuses(task)
    assert statuses.count("queued") == 1 and statuses.count("skipped") == len(statuses) - 1


def test_overlap_buffer_one_holds_one_fire_until_the_running_one_ends(tenant, engine):
    task = _overdue_minutely(tenant, minutes=3, catchup="all", overlap="buffer_one")
    running = _running_run(task)
    engine.load()
    engine.tick()
    statuses = _statuses(task)
    assert statuses.count("pending") == 1 and statuses.count("queued") == 0
    assert due_pending_promote(now=timezone.now(), limit=100) == []
    TaskExecution.platform.filter(id=running.id).update(status="success")
    bells = due_pending_promote(now=timezone.now(), limit=100)
    assert len(bells) == 1 and _statuses(task).count("queued") == 1


def test_overlap_cancel_other_cancels_the_waiting_run(tenant, engine):
    task = _overdue_minutely(tenant, minutes=1, catchup="latest", overlap="cancel_other")
    waiting = TaskExecution.objects.create(
        tenant=tenant, task=task, status="queued", scheduled_at=timezone.now() - timedelta(hours=1)
    )
    engine.load()
    engine.tick()
    waiting.refresh_from_db()
    assert waiting.status == "cancelled"
    assert TaskExecution.platform.filter(task=task, status="queued").count() == 1


def test_resume_recomputes_from_now_without_a_burst(tenant, engine):
    task = _overdue_minutely(tenant, minutes=4, catchup="all")
    task_pause(task=task)
    task_resume(task=task)
    engine.load()
    engine.tick()
    task.refresh_from_db()
    assert TaskExecution.platform.filter(task=task).count() <= 1
    assert task.next_fire_at > timezone.now() - timedelta(seconds=1)
