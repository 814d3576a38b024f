"""Small builders for test data, always through the services (as production does)."""

from __future__ import annotations

from typing import Any

from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services.tasks import task_create


def task_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "UTC"},
        "handler": {"type": "python", "callable": "noop"},
    }
    spec.update(overrides)
    return spec


def make_task(tenant: Tenant, **overrides: Any) -> TaskDefinition:
    return task_create(tenant=tenant, spec=task_spec(**overrides))
