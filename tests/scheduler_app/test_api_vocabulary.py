"""The design document's words: `completed` is our `success` when filtering executions;
`/api/tasks` (its integration test) answers 404 naming `/api/v1/tasks`."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from runs.finish import run_finish
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _finished(task, status: str):
    execution = task_trigger(task=task)
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status=status, transient=False),
    )
    return execution


def test_completed_means_success(api, tenant):
    task = make_task(tenant, name="t", schedule={"type": "manual"})
    done = _finished(task, "success")
    _finished(task, "failed")
    completed = api.get("/api/v1/executions?status=completed").json()["results"]
    assert [row["id"] for row in completed] == [str(done.id)]
    assert completed[0]["status"] == "success"
    assert api.get("/api/v1/executions?status=finished").status_code == 400


def test_the_unversioned_path_points_to_the_versioned_one(api):
    response = api.get("/api/tasks")
    assert response.status_code == 404
    assert response.json()["location"] == "/api/v1/tasks"
    assert "/api/v1/tasks" in response.json()["message"]
    assert APIClient().post("/api/tasks", {}, format="json").status_code == 404
    assert "location" not in api.get("/api/no-such-thing").json()
