"""Backfills on a real worker and beat: one run per fire time, at most once each, released
max_parallel at a time; progress and cancel through the API."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from dags.models import DagRun
from dags.services.definitions import dag_create
from scheduler_app.models import TaskExecution
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, dump_logs
from tests.processes import wait_for_beat_tick, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_10_MINUTES = {"type": "cron", "expression": "*/10 * * * *", "timezone": "UTC"}


def _hour_ago() -> tuple[datetime, datetime]:
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return end - timedelta(hours=1), end


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _max_overlap(executions) -> int:
    """The most runs that were running at one instant."""
    edges = []
    for e in executions:
        edges += [(e.started_at, 1), (e.completed_at, -1)]
    running = peak = 0
    for _at, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        running += step
        peak = max(peak, running)
    return peak


def test_a_task_backfill_runs_each_fire_once_max_parallel_at_a_time(
    tenant, api, live_worker, beats
):
    beat = beats("solo")
    start, end = _hour_ago()
    task = make_task(
        tenant,
        name="hourly-import",
        schedule=EVERY_10_MINUTES,
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 1.0},
    )
    # The scheduler already recorded one of the fire times: the backfill does not run it again.
    recorded = start + timedelta(minutes=20)
    TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="success",
        trigger="schedule",
        scheduled_at=recorded,
        completed_at=recorded,
    )
    response = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {"start": _iso(start), "end": _iso(end), "max_parallel": 2},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["target"] == {"type": "task", "id": str(task.id), "name": "hourly-import"}
    assert body["total"] == 6 and body["status"] == "running" and body["max_parallel"] == 2
    backfill_id = body["id"]

    peak_in_flight = 0

    def done() -> bool:
        nonlocal peak_in_flight
        progress = api.get(f"/api/v1/backfills/{backfill_id}").json()
        peak_in_flight = max(
            peak_in_flight, progress["runs"]["waiting"] + progress["runs"]["running"]
        )
        return progress["status"] == "completed"

    try:
        wait_until(done, timeout=90, interval=0.2, message="the backfill to complete")
    except AssertionError:
        print(dump_logs(live_worker, beat))
        raise
    progress = api.get(f"/api/v1/backfills/{backfill_id}").json()
    assert progress["released"] == 6 and progress["already_recorded"] == 1
    assert progress["runs"] == {
        "waiting": 0,
        "running": 0,
        "succeeded": 5,
        "failed": 0,
        "cancelled": 0,
    }
    assert peak_in_flight <= 2
    runs = list(TaskExecution.platform.filter(task=task, trigger="backfill"))
    fires = {start + timedelta(minutes=10 * i) for i in range(6)}
    assert sorted(e.scheduled_at for e in runs) == sorted(fires - {recorded})
    assert TaskExecution.platform.filter(task=task, scheduled_at=recorded).count() == 1
    assert all(e.status == "success" for e in runs)
    assert _max_overlap(runs) <= 2
    # A second backfill of the same range finds every fire recorded: nothing runs twice.
    again = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {"start": _iso(start), "end": _iso(end), "max_parallel": 6},
        format="json",
    ).json()
    wait_until(
        lambda: api.get(f"/api/v1/backfills/{again['id']}").json()["status"] == "completed",
        timeout=30,
        message="the second backfill to complete",
    )
    assert api.get(f"/api/v1/backfills/{again['id']}").json()["already_recorded"] == 6
    assert TaskExecution.platform.filter(task=task).count() == 6


def test_cancelling_a_backfill_stops_its_releases(tenant, api, live_worker, beats):
    beats("solo")
    start, end = _hour_ago()
    task = make_task(
        tenant,
        name="slow-import",
        schedule=EVERY_10_MINUTES,
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 3.0},
    )
    body = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {"start": _iso(start), "end": _iso(end), "max_parallel": 1},
        format="json",
    ).json()
    wait_until(
        lambda: TaskExecution.platform.filter(task=task, status="running").exists(),
        timeout=30,
        message="the first backfilled run to start",
    )
    cancelled = api.post(f"/api/v1/backfills/{body['id']}/cancel")
    cancelled_at = time.time()
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert api.post(f"/api/v1/backfills/{body['id']}/cancel").status_code == 409
    wait_until(
        lambda: (
            not TaskExecution.platform.filter(
                task=task, status__in=["pending", "queued", "running"]
            ).exists()
        ),
        timeout=30,
        message="the running one to finish",
    )
    # Housekeeping goes on (the beat releases a backfill's runs there); a cancelled backfill
    # releases nothing more, however many rounds pass: two, here.
    rounds = 2 * float(FAST_BEAT["SCHEDULER_HOUSEKEEPING_SECONDS"])
    wait_for_beat_tick("solo", after=cancelled_at + rounds)
    # Only the backfill's: the task's own schedule fires too when the clock crosses a tenth
    # minute while the test runs.
    assert TaskExecution.platform.filter(task=task, trigger="backfill").count() == 1
    final = api.get(f"/api/v1/backfills/{body['id']}").json()
    assert final["released"] == 1 and final["runs"]["succeeded"] == 1


def test_a_dag_backfill_creates_one_run_per_fire(tenant, api, live_worker, beats):
    beats("solo")
    start, end = _hour_ago()
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "nightly",
            "schedule": EVERY_10_MINUTES,
            "tasks": [
                {"id": "a", "handler": {"type": "python", "callable": "noop"}},
                {"id": "b", "handler": {"type": "python", "callable": "noop"}, "depends_on": ["a"]},
            ],
        },
    )
    end = start + timedelta(minutes=30)  # 3 fires
    body = api.post(
        f"/api/v1/dags/{dag.id}/backfill",
        {"start": _iso(start), "end": _iso(end), "max_parallel": 2},
        format="json",
    ).json()
    assert body["total"] == 3 and body["target"]["type"] == "dag"
    wait_until(
        lambda: api.get(f"/api/v1/backfills/{body['id']}").json()["status"] == "completed",
        timeout=60,
        message="the DAG backfill to complete",
    )
    runs = DagRun.platform.filter(dag=dag, trigger="backfill")
    assert sorted(r.scheduled_at for r in runs) == [
        start + timedelta(minutes=10 * i) for i in range(3)
    ]
    assert {r.status for r in runs} == {"success"}
    assert api.get(f"/api/v1/backfills/{body['id']}").json()["runs"]["succeeded"] == 3
    listed = api.get(f"/api/v1/backfills?dag={dag.id}").json()
    assert [b["id"] for b in listed["results"]] == [body["id"]]


def test_reprocess_failed_runs_the_failed_fires_again_once_max_parallel_at_a_time(
    tenant, api, live_worker, beats
):
    """On a real worker and beat: the three failed fires of the hour run again (attempt 2, at
    their own fire times), one at a time; the succeeded ones and the fire without a run are
    left as the policy says; the beat ticking on records none of those instants again."""
    beat = beats("solo")
    start, end = _hour_ago()
    task = make_task(
        tenant,
        name="hourly-import",
        schedule=EVERY_10_MINUTES,
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 0.3},
    )
    fires = [start + timedelta(minutes=10 * i) for i in range(6)]
    recorded = dict(
        zip(fires[1:], ["failed", "success", "failed", "success", "timed_out"], strict=True)
    )
    for at, status in recorded.items():
        TaskExecution.objects.create(
            tenant=tenant, task=task, status=status, trigger="schedule", scheduled_at=at,
            completed_at=at, dead_lettered=status != "success",
        )  # fmt: skip
    response = api.post(
        f"/api/v1/tasks/{task.id}/backfill",
        {"start": _iso(start), "end": _iso(end), "max_parallel": 1, "reprocess": "failed"},
        format="json",
    )
    assert response.status_code == 201, response.content
    backfill_id = response.json()["id"]
    try:
        wait_until(
            lambda: api.get(f"/api/v1/backfills/{backfill_id}").json()["status"] == "completed",
            timeout=90,
            interval=0.2,
            message="the backfill to complete",
        )
    except AssertionError:
        print(dump_logs(live_worker, beat))
        raise
    progress = api.get(f"/api/v1/backfills/{backfill_id}").json()
    assert progress["reprocessed"] == 3 and progress["already_recorded"] == 2
    assert progress["runs"]["succeeded"] == 4 and progress["runs"]["failed"] == 0
    ran = list(TaskExecution.platform.filter(task=task, trigger="backfill"))
    assert _max_overlap(ran) <= 1
    again = sorted((e.scheduled_at, e.attempt) for e in ran if e.attempt == 2)
    assert again == [(at, 2) for at, status in sorted(recorded.items()) if status != "success"]
    assert all(e.status == "success" for e in ran)
    assert not TaskExecution.platform.filter(task=task, dead_lettered=True).exists()
    # (The range only: the task's own schedule may fire a new 10-minute fire meanwhile.)
    in_range = TaskExecution.platform.filter(
        task=task, scheduled_at__gte=start, scheduled_at__lt=end
    )
    assert in_range.count() == 5 + 1 + 3  # recorded, the new fire, the three run again
    wait_for_beat_tick("solo", after=time.time())
    wait_for_beat_tick("solo", after=time.time())
    assert in_range.count() == 5 + 1 + 3
