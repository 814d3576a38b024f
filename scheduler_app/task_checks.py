"""Checks a domain app adds to the saving of a task (its AppConfig.ready registers them):
the core's task services run each on the fields being saved, and a check raises
ValidationFailed naming the field it refuses. So the core validates what an app owns (the
notification targets are alerting's) without importing the app."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

TaskCheck = Callable[..., None]  # (*, tenant_id, fields: Mapping[str, Any]) -> None

_checks: dict[str, TaskCheck] = {}


def task_check_register(name: str, check: TaskCheck) -> None:
    _checks[name] = check


def task_checks_run(*, tenant_id: Any, fields: Mapping[str, Any]) -> None:
    for check in _checks.values():
        check(tenant_id=tenant_id, fields=fields)
