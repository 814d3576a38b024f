"""A DAG's `policy.remaining_runs: N`: N more scheduled runs, then the DAG pauses itself with
the record, counted in each fire's transaction under the DAG's row lock; two schedulers that
both lead start N runs, not more."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from beat.engine import EngineConfig
from dags.models import Dag, DagRun
from dags.services.definitions import dag_create, dag_set_paused
from dags.services.runs import dag_trigger
from tests.beat_engines import engine_builder

pytestmark = pytest.mark.django_db(transaction=True)

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


def _dag(tenant, remaining: int, name: str = "limited") -> Dag:
    return dag_create(
        tenant=tenant,
        raw={
            "dag": name,
            "schedule": MINUTELY,
            "policy": {"catchup": "all", "overlap": "allow", "remaining_runs": remaining},
            "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
        },
    )


def _overdue(dag, minutes: int):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    Dag.platform.filter(id=dag.id).update(next_fire_at=start)
    return start


def _scheduled(dag) -> list:
    runs = DagRun.platform.filter(dag=dag, trigger="schedule")
    return sorted(runs.values_list("scheduled_at", flat=True))


def _assert_paused_by_the_count(dag) -> None:
    dag.refresh_from_db()
    assert dag.paused and dag.remaining_runs == 0 and dag.next_fire_at is None
    assert dag.paused_by == "remaining_runs" and dag.paused_at is not None
    assert "policy.remaining_runs" in dag.pause_note


def test_a_dag_with_two_remaining_starts_two_runs_of_a_burst_then_pauses(tenant, make_engine):
    dag = _dag(tenant, 2)
    start = _overdue(dag, 5)
    engine = make_engine()
    engine.tick()
    assert _scheduled(dag) == [start, start + timedelta(minutes=1)]
    _assert_paused_by_the_count(dag)
    engine.tick()
    assert len(_scheduled(dag)) == 2


def test_two_schedulers_that_both_lead_start_the_count_once(tenant, make_engine):
    dag = _dag(tenant, 3)
    start = _overdue(dag, 5)
    first, second = make_engine("alpha", own_lock=True), make_engine("beta", own_lock=True)
    first.tick()
    second.tick()
    assert first.leading and second.leading
    assert _scheduled(dag) == [start + timedelta(minutes=m) for m in range(3)]
    _assert_paused_by_the_count(dag)


def test_a_manual_run_does_not_count_and_a_resume_clears_a_spent_count(tenant, make_engine):
    dag = _dag(tenant, 1)
    dag_trigger(dag=dag)
    dag.refresh_from_db()
    assert dag.remaining_runs == 1
    _overdue(dag, 1)
    make_engine().tick()
    _assert_paused_by_the_count(dag)
    resumed = dag_set_paused(dag=dag, paused=False)
    assert not resumed.paused and resumed.remaining_runs is None and resumed.paused_by == ""
    assert resumed.next_fire_at is not None


def test_the_api_shows_a_dags_count_left_and_its_record(api, tenant, make_engine):
    dag = _dag(tenant, 1, name="api-limited")
    _overdue(dag, 1)
    make_engine().tick()
    body = api.get(f"/api/v1/dags/{dag.id}").json()
    assert body["policy"]["remaining_runs"] == 0
    assert body["paused"] is True and body["paused_by"] == "remaining_runs"
    assert "policy.remaining_runs" in body["pause_note"]
