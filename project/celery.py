"""The Celery application: configured from Django settings (CELERY_* names), JSON only."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import import_modules, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers", "scheduler_app", "dags", "alerting", "data_lifecycle", "runs"])


@task_prerun.connect
def _database_connections_checked(**kwargs) -> None:
    """What Django does around a request, around a task: drop a connection that broke or
    outlived CONN_MAX_AGE (Celery no longer closes it after every task: CELERY_DB_REUSE_MAX)."""
    # Local: this module loads with the settings (project/__init__), before Django is set up.
    from django.db import close_old_connections  # noqa: PLC0415

    close_old_connections()


@import_modules.connect
def _checked_at_start(**kwargs) -> None:
    """`celery worker` and `celery beat` send this once, early (after Celery's Django fixup
    has set Django up, before the worker consumes or the beat builds its schedule)."""
    # Local: this module loads with the settings (project/__init__), before Django is set up.
    from project.startup import exit_on_check_errors  # noqa: PLC0415

    exit_on_check_errors("celery")
