"""The beat leader's batch meeting a lost database (the primary killed, its standby being
promoted): nothing it owed is skipped, nothing is recorded twice, and what a COMMIT whose
answer was lost wrote is rung all the same."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from beat import engine as engine_module
from beat.engine import EngineConfig
from scheduler_app.db_retry import connection_lost, database_retry
from scheduler_app.models import TaskDefinition, TaskExecution
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


def _overdue_minutely(tenant, minutes: int):
    task = make_task(
        tenant,
        name="minutely",
        schedule={"type": "cron", "expression": "* * * * *"},
        policy={"catchup": "all"},
    )
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    TaskDefinition.platform.filter(id=task.id).update(next_fire_at=start)
    return task


def test_a_batch_the_database_refused_is_owed_again_and_recorded_once(
    tenant, make_engine, monkeypatch
):
    task = _overdue_minutely(tenant, minutes=3)
    engine = make_engine("alpha")
    real_record = engine._record

    def primary_gone(batch, *, now):
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(engine, "_record", primary_gone)
    with pytest.raises(psycopg.OperationalError):
        engine.tick()
    assert not TaskExecution.platform.filter(task=task).exists()
    monkeypatch.setattr(engine, "_record", real_record)
    engine.tick()
    times = list(TaskExecution.platform.filter(task=task).values_list("scheduled_at", flat=True))
    assert len(times) in (3, 4) and len(set(times)) == len(times)  # the minute may turn


def test_a_commit_whose_answer_was_lost_is_rung_by_the_next_tick(tenant, make_engine, monkeypatch):
    """The COMMIT landed (on the standby too) but the beat saw an error: recording again
    inserts nothing (ON CONFLICT), and the rows nobody rang are rung once the database
    answers again."""
    task = _overdue_minutely(tenant, minutes=2)
    engine = make_engine("alpha")
    real_record = engine._record
    real_submit = engine._publisher.submit

    def landed_but_answer_lost(batch, *, now):
        monkeypatch.setattr(engine._publisher, "submit", lambda bells: None)
        real_record(batch, now=now)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(engine, "_record", landed_but_answer_lost)
    with pytest.raises(psycopg.OperationalError):
        engine.tick()
    recorded = TaskExecution.platform.filter(task=task).count()
    assert recorded in (2, 3)
    monkeypatch.setattr(engine, "_record", real_record)
    monkeypatch.setattr(engine._publisher, "submit", real_submit)
    monkeypatch.setattr(engine_module, "REPUBLISH_AGAIN_SECONDS", 3600.0)
    published = engine.published_total
    engine.tick()
    assert TaskExecution.platform.filter(task=task).count() == recorded  # none twice
    assert engine.published_total == published + recorded
    engine.tick()
    assert engine.published_total == published + recorded  # rung once, not every tick


def test_a_statement_on_a_lost_connection_runs_again_on_a_new_one():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.connection.close()  # what a killed primary leaves the client
    calls = []

    def query():
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 2")
            return cursor.fetchone()[0]

    assert database_retry(query, what="test", pause=lambda seconds: None) == 2
    assert len(calls) == 2 and not connection_lost()


def test_a_failure_on_a_live_connection_is_not_retried():
    calls = []

    def lock_timeout():
        calls.append(1)
        raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        database_retry(lock_timeout, what="test", pause=lambda seconds: None)
    assert len(calls) == 1


def test_the_retry_gives_up_after_its_time():
    connection.ensure_connection()
    connection.connection.close()
    ticks = iter(range(100))

    def unreachable():
        raise psycopg.OperationalError("connection refused")

    with pytest.raises(psycopg.OperationalError):
        database_retry(
            unreachable,
            what="test",
            within_seconds=5,
            clock=lambda: float(next(ticks)),
            pause=lambda seconds: None,
        )
