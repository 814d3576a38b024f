"""A tenant's `celery` handler naming one of the platform's own Celery tasks, from any app, is
refused, even when the operator lists it in CELERY_HANDLER_TASKS: at save time (400 naming
handler.task) and again by the worker at run time (nothing is sent). `alerting.deliver` and
`alerting.run_notifications` were not covered (the list had no `alerting.` nor
`data_lifecycle.`)."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.apps import apps

from handler_contract.base import BufferedLogSink, HandlerContext
from handler_contract.validation import PLATFORM_TASK_PREFIXES, celery_platform_task
from project.celery import app as celery_app
from scheduler_app.models import TaskDefinition
from scheduler_app.platform_tasks import platform_task_prefixes
from workers.handlers import run_handler


def _registered_task_names() -> list[str]:
    celery_app.loader.import_default_modules()
    return sorted(celery_app.tasks.keys())


def _names_under_every_app() -> list[str]:
    roots = sorted({config.name.split(".", 1)[0] for config in apps.get_app_configs()})
    return [f"{root}.anything_at_all" for root in roots]


PLATFORM_NAMES = [*_registered_task_names(), *_names_under_every_app()]


def test_every_task_the_celery_app_registers_is_a_platform_task():
    names = _registered_task_names()
    assert {"alerting.deliver", "dags.run_map_shard", "workers.run_execution"} <= set(names)
    uncovered = [name for name in names if not celery_platform_task(name, platform_task_prefixes())]
    assert uncovered == []
    # The pure default (no Django) covers the platform's own packages too.
    ours = [name for name in names if not name.startswith("celery.")]
    assert [name for name in ours if not celery_platform_task(name)] == []
    assert {"alerting.", "data_lifecycle."} <= set(PLATFORM_TASK_PREFIXES)


@pytest.mark.django_db
@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_a_tenant_cannot_name_a_platform_task_of_any_app_even_when_listed(api, settings, name):
    settings.CELERY_HANDLER_TASKS = [*PLATFORM_NAMES, "reports.nightly"]
    response = api.post(
        "/api/v1/tasks",
        {
            "name": "ring-the-platform",
            "schedule": {"type": "manual"},
            "handler": {"type": "celery", "task": name, "args": []},
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "handler.task"
    assert "platform's own tasks" in response.json()["message"]
    assert not TaskDefinition.platform.exists()


@pytest.mark.django_db
def test_a_listed_task_of_the_tenants_own_is_still_accepted(api, settings):
    settings.CELERY_HANDLER_TASKS = [*PLATFORM_NAMES, "reports.nightly"]
    response = api.post(
        "/api/v1/tasks",
        {
            "name": "legacy-report",
            "schedule": {"type": "manual"},
            "handler": {"type": "celery", "task": "reports.nightly"},
        },
        format="json",
    )
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_the_worker_refuses_them_at_run_time_and_sends_nothing(name):
    """What workers/runner.py calls: the stored definition is validated again."""
    sent: list[str] = []
    outcome = run_handler(
        {"type": "celery", "task": name, "args": []},
        HandlerContext(
            execution_id=str(uuid.uuid4()),
            attempt=1,
            timeout_seconds=10,
            parameters={},
            log=BufferedLogSink(max_bytes=10_000),
            cancel_event=threading.Event(),
        ),
        celery_send_task=lambda task, **kwargs: sent.append(task),
        celery_allowed_tasks=PLATFORM_NAMES,
        platform_task_prefixes=platform_task_prefixes(),
    )
    assert (outcome.status, outcome.error_class) == ("failed", "invalid_config")
    assert "platform's own tasks" in outcome.error_message
    assert sent == []
