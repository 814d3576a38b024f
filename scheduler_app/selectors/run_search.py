"""Finding runs: the filters of the dashboard's Runs page over a tenant's executions.

Every filter narrows a queryset that starts at the tenant, so an id of another tenant's task,
DAG or run in a filter matches nothing. Bad input is a ValidationFailed naming the field.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskExecution, Tenant

# The time windows a person picks from; "custom" takes since/until.
WINDOWS: dict[str, timedelta | None] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
DEFAULT_WINDOW = "24h"
ID_PREFIX = re.compile(r"^[0-9a-f]{4,32}$|^[0-9a-f-]{36}$")


def _instant(value: str, *, field: str) -> datetime:
    """An ISO date-time; without an offset it is UTC (what a datetime-local input sends)."""
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValidationFailed(f"{field} must be a date and time (YYYY-MM-DDTHH:MM)", field=field)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def time_range(filters: Mapping[str, str]) -> tuple[datetime | None, datetime | None]:
    """(since, until) of the chosen window: a named window ending now, or custom bounds."""
    window = filters.get("window") or DEFAULT_WINDOW
    if window == "custom":
        since = _instant(filters["since"], field="since") if filters.get("since") else None
        until = _instant(filters["until"], field="until") if filters.get("until") else None
        if since and until and since >= until:
            raise ValidationFailed("since must be before until", field="until")
        return since, until
    if window not in WINDOWS:
        raise ValidationFailed(
            f"window must be one of {', '.join([*WINDOWS, 'custom'])}", field="window"
        )
    length = WINDOWS[window]
    return (timezone.now() - length if length else None), None


def _choice(value: str, choices: Iterable[str], *, field: str) -> str:
    allowed = list(choices)
    if value not in allowed:
        raise ValidationFailed(f"{field} must be one of {', '.join(allowed)}", field=field)
    return value


def id_prefix_match(query: str) -> Q | None:
    """An id, or its first characters as the pages show them (`1ef59a75`), matches by prefix."""
    text = query.strip().lower()
    if not ID_PREFIX.match(text):
        return None
    return Q(id_text__startswith=text)


def execution_search(
    *,
    tenant: Tenant,
    filters: Mapping[str, str],
    root_ids: QuerySet | None = None,
) -> QuerySet[TaskExecution]:
    """The tenant's executions matching `filters`: task (id or exact name), status, tag,
    trigger, worker (substring), q (task name, error, or id prefix), window/since/until.
    `root_ids`: only the execution chains with these roots (a DAG's node executions)."""
    executions = TaskExecution.objects.select_related("task").filter(tenant=tenant)
    since, until = time_range(filters)
    if since:
        executions = executions.filter(scheduled_at__gte=since)
    if until:
        executions = executions.filter(scheduled_at__lt=until)
    if task := filters.get("task", "").strip():
        try:
            executions = executions.filter(task_id=uuid.UUID(task))
        except ValueError:
            executions = executions.filter(task__name=task)
    if status := filters.get("status"):
        executions = executions.filter(
            status=_choice(status, ExecutionStatus.values, field="status")
        )
    if trigger := filters.get("trigger"):
        executions = executions.filter(trigger=_choice(trigger, Trigger.values, field="trigger"))
    if tag := filters.get("tag", "").strip():
        executions = executions.filter(task__tags__contains=[tag])
    if worker := filters.get("worker", "").strip():
        executions = executions.filter(worker_id__icontains=worker)
    if query := filters.get("q", "").strip():
        matches = Q(task__name__icontains=query) | Q(error_message__icontains=query)
        if by_id := id_prefix_match(query):
            executions = executions.annotate(id_text=Cast("id", CharField()))
            matches |= by_id
        executions = executions.filter(matches)
    if root_ids is not None:
        executions = executions.filter(root_execution_id__in=root_ids)
    return executions
