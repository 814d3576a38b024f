"""A run's checkpoint through the API: the execution's detail says whether there is one and
its size, not its content; the content is at executions/{id}/checkpoint, for the run's own
tenant; another tenant, playing the attacker with the ids, gets a 404 that shows nothing."""

from __future__ import annotations

import pytest

from scheduler_app.services.checkpoints import checkpoint_save
from scheduler_app.services.follow_ups import execution_follow_up_create
from scheduler_app.services.task_definitions import task_trigger
from tests.api_clients import member_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db
STATE = {"next": 7, "cursor": "private-cursor-value"}


def _run_with_checkpoint(tenant):
    task = make_task(tenant, name="checkpointed", schedule={"type": "manual"})
    first = task_trigger(task=task)
    size = checkpoint_save(
        tenant_id=tenant.id, chain_id=first.id, execution_id=first.id, attempt=1, state=STATE
    )
    second = execution_follow_up_create(
        previous=first,
        status="pending",
        scheduled_at=first.scheduled_at,
        attempt=2,
        max_attempts=3,
    )
    return first, second, size


def test_the_detail_shows_the_checkpoints_size_and_the_endpoint_its_content(tenant, api):
    first, second, size = _run_with_checkpoint(tenant)
    for execution in (first, second):  # every attempt of the run sees the run's checkpoint
        detail = api.get(f"/api/v1/executions/{execution.id}").json()
        assert detail["checkpoint"]["size_bytes"] == size
        assert detail["checkpoint"]["attempt"] == 1
        assert "private-cursor-value" not in str(detail)

    body = api.get(f"/api/v1/executions/{second.id}/checkpoint").json()
    assert body["state"] == STATE
    assert body["chain_id"] == str(first.id) and body["saved_by_execution_id"] == str(first.id)
    assert body["size_bytes"] == size and body["file_text"] is None


def test_a_run_without_a_checkpoint_says_so(tenant, api):
    run = task_trigger(task=make_task(tenant, name="plain", schedule={"type": "manual"}))
    assert api.get(f"/api/v1/executions/{run.id}").json()["checkpoint"] is None
    response = api.get(f"/api/v1/executions/{run.id}/checkpoint")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_another_tenant_cannot_read_a_checkpoint(tenant, tenant_factory):
    first, second, _ = _run_with_checkpoint(tenant)
    attacker_tenant, _ = tenant_factory("attacker")
    attacker, _ = member_client(attacker_tenant, "admin")
    for execution in (first, second):
        for path in (
            f"/api/v1/executions/{execution.id}/checkpoint",
            f"/api/v1/executions/{execution.id}",
        ):
            response = attacker.get(path)
            assert response.status_code == 404, path
            seen = response.content.decode()
            assert "private-cursor-value" not in seen and "size_bytes" not in seen


def test_a_task_cannot_point_its_checkpoint_file_elsewhere(api):
    response = api.post(
        "/api/v1/tasks",
        {
            "name": "sneaky",
            "schedule": {"type": "manual"},
            "handler": {
                "type": "shell",
                "command": ["true"],
                "environment": {"SCHEDULER_CHECKPOINT_FILE": "/etc/passwd"},
            },
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "handler.environment" in response.content.decode()
