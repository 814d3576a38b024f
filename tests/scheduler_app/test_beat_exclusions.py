"""Calendar exclusions in the beat (driven with its injected clock, a real Redis lock and
the real database), in catch-up, in the missed-schedule ledger and in backfills: an excluded
fire time creates no run and is never owed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from beat.engine import EngineConfig
from dags.services.backfills import backfill_create
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.monitoring.missed import missed_fires
from tests.beat_engines import engine_builder
from tests.clock import ManualClock
from tests.factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=3 * 86400,
    requeue_grace_seconds=60,
    housekeeping_seconds=3600,
    lock_ttl_seconds=3,
)
HALF_A_SECOND = timedelta(milliseconds=500)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def _task(tenant, schedule: dict, *, first_fire: datetime, catchup: str = "none"):
    task = make_task(tenant, name="calendar", schedule=schedule, policy={"catchup": catchup})
    TaskDefinition.platform.filter(id=task.id).update(next_fire_at=first_fire)
    return task


def _fired(task) -> list[datetime]:
    return sorted(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))


@pytest.fixture
def beat(redis_client):
    """`beat(start)`: a loaded leader engine whose clock reads `start` until moved."""
    with engine_builder(redis_client, CONFIG) as build:

        def make(start: datetime):
            clock = ManualClock(start)
            engine = build("alpha")
            engine.clock = clock
            return engine, clock

        yield make


def test_the_beat_steps_over_a_us_holiday(tenant, beat):
    schedule = {
        "type": "cron",
        "expression": "0 9 * * *",
        "timezone": "America/New_York",
        "exclude": [{"calendar": "holidays:US"}],
    }
    task = _task(tenant, schedule, first_fire=utc(2026, 12, 24, 14))
    engine, clock = beat(utc(2026, 12, 24, 14) + HALF_A_SECOND)
    engine.tick()
    task.refresh_from_db()
    assert _fired(task) == [utc(2026, 12, 24, 14)]
    assert task.next_fire_at == utc(2026, 12, 26, 14)  # Christmas Day is stepped over
    clock.moment = utc(2026, 12, 25, 14) + HALF_A_SECOND
    engine.tick()
    assert _fired(task) == [utc(2026, 12, 24, 14)]
    clock.moment = utc(2026, 12, 26, 14) + HALF_A_SECOND
    engine.tick()
    assert _fired(task) == [utc(2026, 12, 24, 14), utc(2026, 12, 26, 14)]


def test_spring_forward_an_excluded_local_day_is_skipped_whatever_its_utc_date(tenant, beat):
    # 00:30 Berlin on 29 March 2026 is 23:30 UTC on the 28th; the next day is CEST.
    schedule = {
        "type": "cron",
        "expression": "30 0 * * *",
        "timezone": "Europe/Berlin",
        "exclude": [{"date": "2026-03-29", "reason": "migration"}],
    }
    task = _task(tenant, schedule, first_fire=utc(2026, 3, 27, 23, 30))
    engine, clock = beat(utc(2026, 3, 27, 23, 30) + HALF_A_SECOND)
    engine.tick()
    task.refresh_from_db()
    assert task.next_fire_at == utc(2026, 3, 29, 22, 30)
    clock.moment = utc(2026, 3, 28, 23, 30) + HALF_A_SECOND
    engine.tick()
    clock.moment = utc(2026, 3, 29, 22, 30) + HALF_A_SECOND
    engine.tick()
    assert _fired(task) == [utc(2026, 3, 27, 23, 30), utc(2026, 3, 29, 22, 30)]


def test_fall_back_both_occurrences_of_the_repeated_hour_are_skipped(tenant, beat):
    schedule = {
        "type": "cron",
        "expression": "*/30 2 * * *",
        "timezone": "Europe/Berlin",
        "exclude": [{"date": "2026-10-25"}],
    }
    task = _task(tenant, schedule, first_fire=utc(2026, 10, 24, 0, 30))  # 02:30 CEST
    engine, clock = beat(utc(2026, 10, 24, 0, 30) + HALF_A_SECOND)
    engine.tick()
    task.refresh_from_db()
    assert task.next_fire_at == utc(2026, 10, 26, 1, 0)  # 02:00 CET on the 26th
    for moment in (utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1)):
        clock.moment = moment + HALF_A_SECOND
        engine.tick()
    clock.moment = utc(2026, 10, 25, 1, 30) + HALF_A_SECOND
    engine.tick()
    assert _fired(task) == [utc(2026, 10, 24, 0, 30)]


def test_catch_up_does_not_owe_an_excluded_fire(tenant, beat):
    schedule = {
        "type": "cron",
        "expression": "0 9 * * *",
        "timezone": "UTC",
        "exclude": [{"date": "2026-12-25", "reason": "closed"}],
    }
    task = _task(tenant, schedule, first_fire=utc(2026, 12, 24, 9), catchup="all")
    engine, _ = beat(utc(2026, 12, 26, 9) + HALF_A_SECOND)  # the beat was down two days
    engine.tick()
    assert _fired(task) == [utc(2026, 12, 24, 9), utc(2026, 12, 26, 9)]


def test_the_missed_ledger_does_not_count_excluded_fires(tenant):
    schedule = {
        "type": "cron",
        "expression": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "exclude": [{"calendar": "holidays:DE-BY"}],
    }
    task = make_task(tenant, name="calendar", schedule=schedule)
    TaskDefinition.platform.filter(id=task.id).update(created_at=utc(2026, 1, 1))
    # 5, 6 (Epiphany in Bavaria) and 7 January expected at 08:00 UTC; none ran.
    (misses,) = missed_fires(
        tenant=tenant,
        window=timedelta(days=3),
        grace_seconds=60,
        now=utc(2026, 1, 7, 12),
    )
    assert misses.expected == 2
    assert [miss.scheduled_at for miss in misses.missed] == [utc(2026, 1, 5, 8), utc(2026, 1, 7, 8)]


def test_a_backfill_skips_excluded_fires(tenant):
    schedule = {
        "type": "cron",
        "expression": "0 * * * *",
        "timezone": "UTC",
        "exclude": [{"cron": "0 2-3 * * *", "reason": "maintenance"}],
    }
    task = make_task(tenant, name="calendar", schedule=schedule)
    backfill = backfill_create(
        tenant=tenant,
        task=task,
        start=utc(2026, 11, 1, 0),
        end=utc(2026, 11, 1, 5),
        max_parallel=10,
    )
    assert backfill.total == 3
    hours = sorted(run.hour for run in _fired(task))
    assert hours == [0, 1, 4]
