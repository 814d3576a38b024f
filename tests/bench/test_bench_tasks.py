"""The benches create their tasks as a user does: a task they bulk-copy is the task the API
makes from the same definition (bench/support.py: tasks_create)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bench import stack_defaults, support
from scheduler_app.models import TaskDefinition, Tenant

pytestmark = pytest.mark.django_db

SPEC = {
    "schedule": {"type": "interval", "expression": "1s"},
    "handler": {"type": "shell", "command": ["true"]},
}
# Who, when and which: the only fields in which two tasks of one definition may differ.
OWN = {"id", "name", "tenant_id", "created_by_id", "created_at", "updated_at", "changed_at"}


def _fields(task: TaskDefinition) -> dict:
    task.refresh_from_db()
    return {
        field.attname: getattr(task, field.attname)
        for field in TaskDefinition._meta.concrete_fields
        if field.attname not in OWN | {"next_fire_at"}
    }


def test_a_bulk_copied_task_is_the_task_the_api_makes(api):
    response = api.post("/api/v1/tasks", {"name": "by-the-api", **SPEC}, format="json")
    assert response.status_code == 201, response.content
    by_api = TaskDefinition.platform.get(id=response.json()["id"])
    first, copy = support.tasks_create(2, spec=SPEC, prefix="bulk")
    assert TaskDefinition.platform.filter(id=copy.id).exists()
    assert _fields(copy) == _fields(by_api)
    assert _fields(copy) == _fields(first)
    for task in (copy, by_api):
        assert timedelta(0) < task.next_fire_at - task.created_at <= timedelta(seconds=1)


def test_the_bench_tenant_has_a_new_tenants_quotas_unless_raised():
    tenant = support.bench_tenant()
    fresh = Tenant(slug="fresh")
    stack_defaults.tenant_quotas_for(stack_defaults.DEFAULTS, rate=150)
    tenant.refresh_from_db()
    assert tenant.max_runs_per_hour == fresh.max_runs_per_hour
    assert tenant.max_concurrent_runs == fresh.max_concurrent_runs
    stack_defaults.tenant_quotas_for((stack_defaults.RAISED_QUOTAS,), rate=150)
    tenant.refresh_from_db()
    assert tenant.max_runs_per_hour == 10 * 150 * 3600
