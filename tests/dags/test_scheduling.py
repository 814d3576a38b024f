"""DAG schedules: catch-up, overlap and fire-once, driven directly (no beat process)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dags.models import Dag, DagRun
from dags.services.definitions import dag_create
from dags.services.scheduling import dag_schedules_fire

pytestmark = pytest.mark.django_db

H = {"type": "python", "callable": "noop"}


def every_minute(tenant, **extra):
    raw = {
        "dag": "minutely",
        "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
        "tasks": [{"id": "a", "handler": H}],
        **extra,
    }
    return dag_create(tenant=tenant, raw=raw)


def missed(dag, minutes: int):
    """Pretend the scheduler was down: the next fire is `minutes` whole minutes ago. The
    clock returned is 30 s past the minute, so the fire at the minute is late, never within
    the on-time grace (a real clock read in a minute's first seconds made it on time)."""
    minute = timezone.now().replace(second=0, microsecond=0)
    Dag.objects.filter(id=dag.id).update(next_fire_at=minute - timedelta(minutes=minutes))
    return minute + timedelta(seconds=30)


def due_at(dag, minutes_ago: int):
    """One fire due `minutes_ago` minutes ago, and the clock one second after it."""
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    Dag.objects.filter(id=dag.id).update(next_fire_at=start)
    return start + timedelta(seconds=1)


@pytest.mark.parametrize(("catchup", "runs"), [("all", 4), ("latest", 1), ("none", 0)])
def test_catchup_policies(tenant, catchup, runs, django_capture_on_commit_callbacks):
    dag = every_minute(tenant, catchup=catchup, overlap="allow")
    now = missed(dag, 3)  # fires owed at -3, -2, -1 and 0 minutes
    with django_capture_on_commit_callbacks(execute=False):
        dag_schedules_fire(now=now, catchup_window_seconds=3600)
    assert DagRun.objects.filter(dag=dag, trigger="schedule").count() == runs
    dag.refresh_from_db()
    assert dag.next_fire_at > now


def test_a_fire_is_recorded_once_even_if_two_schedulers_fire_it(
    tenant, django_capture_on_commit_callbacks
):
    dag = every_minute(tenant)
    now = missed(dag, 0)
    stale = Dag.objects.get(id=dag.id)
    with django_capture_on_commit_callbacks(execute=False):
        dag_schedules_fire(now=now)
        # A second scheduler that read the row before the first moved it on:
        Dag.objects.filter(id=dag.id).update(next_fire_at=stale.next_fire_at)
        dag_schedules_fire(now=now)
    assert DagRun.objects.filter(dag=dag).count() == 1


def test_overlap_skip_and_buffer_one(tenant, django_capture_on_commit_callbacks):
    skip = every_minute(tenant, overlap="skip")
    with django_capture_on_commit_callbacks(execute=False):
        for minutes_ago in (2, 1, 0):
            dag_schedules_fire(now=due_at(skip, minutes_ago))
    # The first run never finishes (no worker): the later fires are skipped.
    assert DagRun.objects.filter(dag=skip).count() == 1

    buffered = dag_create(
        tenant=tenant,
        raw={
            "dag": "buffered",
            "overlap": "buffer_one",
            "schedule": {"type": "cron", "expression": "* * * * *"},
            "tasks": [{"id": "a", "handler": H}],
        },
    )
    with django_capture_on_commit_callbacks(execute=False):
        for minutes_ago in (3, 2, 1, 0):
            dag_schedules_fire(now=due_at(buffered, minutes_ago))
    statuses = sorted(DagRun.objects.filter(dag=buffered).values_list("status", flat=True))
    assert statuses == ["queued", "running"]


def test_paused_dags_do_not_fire_and_resume_does_not_burst(tenant):
    from dags.services.definitions import dag_set_paused

    dag = every_minute(tenant)
    dag = dag_set_paused(dag=dag, paused=True)
    assert dag.next_fire_at is None
    dag = dag_set_paused(dag=dag, paused=False)
    assert dag.next_fire_at > timezone.now()
