"""Task idempotency keys on a real worker and a real beat: a run whose key already
succeeded for its task is recorded `skipped` with that execution's id, across retries
(a retry carries its fire's key) and across scheduled fires."""

from __future__ import annotations

import pytest

from scheduler_app.models import TaskExecution
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "{{parameters.region}}:{{scheduled_date}}"


def _create(api, **fields) -> str:
    body = {
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "flaky"},
        "idempotency_key": KEY,
        **fields,
    }
    response = api.post("/api/v1/tasks", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["idempotency_key"] == body["idempotency_key"]
    return response.json()["id"]


def _trigger(api, task_id: str, **parameters) -> str:
    response = api.post(
        f"/api/v1/tasks/{task_id}/trigger", {"parameters": parameters}, format="json"
    )
    assert response.status_code == 202, response.content
    return response.json()["execution_id"]


def test_a_retry_whose_key_succeeded_meanwhile_is_skipped(api, live_worker, beats):
    beat = beats("keys")  # the leader publishes retries when they fall due
    task_id = _create(
        api,
        name="charge-card",
        retry_policy={"max_attempts": 6, "backoff": "fixed", "base_delay_seconds": 3},
    )
    # A: fails until attempt 99, so each retry would fail again ...
    first = _trigger(api, task_id, region="eu", succeed_on_attempt=99)
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(id=first, status="failed").exists(),
            timeout=60,
            message="the first attempt of A to fail",
        )
        # ... B, the same key (same region, same day), succeeds at once.
        other = _trigger(api, task_id, region="eu", succeed_on_attempt=1)
        wait_until(
            lambda: TaskExecution.platform.filter(id=other, status="success").exists(),
            timeout=60,
            message="B to succeed",
        )
        # A's next retry finds B's success under its key: skipped, not run.
        wait_until(
            lambda: TaskExecution.platform.filter(
                root_execution_id=first, status="skipped"
            ).exists(),
            timeout=90,
            message="a retry of A to be skipped",
        )
    except AssertionError:
        print(dump_logs(live_worker, beat))
        raise
    chain = list(TaskExecution.platform.filter(root_execution_id=first).order_by("attempt"))
    b = TaskExecution.platform.get(id=other)
    keys = {attempt.idempotency_key for attempt in chain}
    assert keys == {b.idempotency_key} and b.idempotency_key.startswith("eu:")
    skipped = chain[-1]
    assert skipped.status == "skipped" and skipped.attempt >= 2
    assert skipped.skipped_for_execution_id == b.id
    assert skipped.result["skipped_for_execution_id"] == str(b.id)
    assert all(attempt.status == "failed" for attempt in chain[:-1])
    # The API shows the key and why it was skipped.
    shown = api.get(f"/api/v1/executions/{skipped.id}").json()
    assert shown["idempotency_key"] == b.idempotency_key
    assert shown["skipped_for_execution_id"] == str(b.id)

    # Another region is another key: it runs.
    third = _trigger(api, task_id, region="us", succeed_on_attempt=1)
    wait_until(
        lambda: TaskExecution.platform.filter(id=third, status="success").exists(),
        timeout=60,
        message="the us run to succeed",
    )


def test_scheduled_fires_of_one_key_run_once(api, live_worker, beats):
    task_id = _create(
        api,
        name="daily-report",
        schedule={"type": "cron", "expression": "*/2 * * * * *", "timezone": "UTC"},
        handler={"type": "python", "callable": "echo"},
        parameters={"region": "eu"},
    )
    beat = beats("keys-fires")
    try:
        wait_until(
            lambda: TaskExecution.platform.filter(task_id=task_id, status="skipped").count() >= 2,
            timeout=90,
            message="two fires skipped for the first one's success",
        )
    except AssertionError:
        print(dump_logs(live_worker, beat))
        raise
    api.post(f"/api/v1/tasks/{task_id}/pause")
    finished = TaskExecution.platform.filter(task_id=task_id, status__in=["success", "skipped"])
    first = finished.filter(status="success").order_by("started_at").first()
    same_day = [e for e in finished if e.idempotency_key == first.idempotency_key]
    successes = [e for e in same_day if e.status == "success"]
    # One success per key: a fire that starts while the first is still running waits for it.
    # Which fire wins the key is the first to claim it, not the first scheduled: two fires
    # queued together may be taken by the worker in either order.
    assert [e.id for e in successes] == [first.id], _described(task_id) + dump_logs(
        live_worker, beat
    )
    for execution in same_day:
        if execution.status == "skipped":
            assert execution.skipped_for_execution_id == first.id
            assert execution.completed_at >= first.started_at


def _described(task_id: str) -> str:
    """Every run of the task, for the message of a failed assertion."""
    fields = (
        "id",
        "status",
        "trigger",
        "attempt",
        "worker_id",
        "scheduled_at",
        "started_at",
        "completed_at",
        "idempotency_key",
        "skipped_for_execution_id",
        "error_class",
    )
    rows = TaskExecution.platform.filter(task_id=task_id).order_by("scheduled_at", "attempt")
    return "\n".join(str(row) for row in rows.values_list(*fields)) + "\n"


def test_runs_of_one_key_started_together_run_once(api, live_worker):
    """Triggered at the same instant onto a worker with free processes: one runs, the other
    waits for it and is skipped for its success."""
    task_id = _create(
        api,
        name="slow-report",
        handler={"type": "python", "callable": "sleep"},
        idempotency_key="{{parameters.seconds}}:{{scheduled_date}}",
        parameters={"seconds": 1.5},
    )
    runs = [_trigger(api, task_id) for _ in range(3)]
    wait_until(
        lambda: (
            TaskExecution.platform.filter(id__in=runs, status__in=["success", "skipped"]).count()
            == 3
        ),
        timeout=60,
        message="the three runs of the key to end",
    )
    ended = {e.id: e for e in TaskExecution.platform.filter(id__in=runs)}
    (winner,) = [e for e in ended.values() if e.status == "success"]
    skipped = [e for e in ended.values() if e.status == "skipped"]
    assert len(skipped) == 2
    assert {e.skipped_for_execution_id for e in skipped} == {winner.id}
