"""Turn django-celery-beat `PeriodicTask` rows into task definitions with a `celery` handler.

Each periodic task becomes a task of the same name that sends the same Celery task name with
its args/kwargs to its queue (default `celery`), so the team's existing Celery workers keep
doing the work while this scheduler does the timing. Mapping:
- crontab (with its timezone) -> cron, `minute hour day_of_month month_of_year day_of_week`
- interval (days/hours/minutes/seconds) -> interval `<n>d|h|m|s`
- clocked -> once at `clocked_time`
- solar, microsecond intervals, one_off on a recurring schedule -> reported, not converted
`enabled=False` becomes a disabled task. Rows are read with plain SQL (django-celery-beat
need not be installed), from this project's database or any `--from-url`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.errors import DomainError
from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services.task_definitions import task_create, task_set_enabled
from scheduler_app.services.task_spec import task_spec_to_fields

INTERVAL_UNITS = {"days": "d", "hours": "h", "minutes": "m", "seconds": "s"}
DEFAULT_QUEUE = "celery"

QUERY = """
SELECT p.id, p.name, p.task, p.args, p.kwargs, p.queue, p.enabled, p.one_off, p.description,
       c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week, c.timezone,
       i.every, i.period, k.clocked_time, p.solar_id
FROM django_celery_beat_periodictask p
LEFT JOIN django_celery_beat_crontabschedule c ON c.id = p.crontab_id
LEFT JOIN django_celery_beat_intervalschedule i ON i.id = p.interval_id
LEFT JOIN django_celery_beat_clockedschedule k ON k.id = p.clocked_id
ORDER BY p.name
"""


@dataclass
class Planned:
    source_id: int
    name: str
    spec: dict[str, Any]
    enabled: bool


@dataclass
class Skipped:
    source_id: int
    name: str
    reason: str


@dataclass
class ImportReport:
    planned: list[Planned] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    created: list[TaskDefinition] = field(default_factory=list)


def read_periodic_tasks(from_url: str | None = None) -> list[dict[str, Any]]:
    """The PeriodicTask rows with their schedules, from our database or `from_url`."""
    if not from_url:
        with connection.cursor() as cursor:
            cursor.execute(QUERY)
            names = [c[0] for c in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    if from_url.startswith(("sqlite:///", "sqlite3:///")):
        path = from_url.split(":///", 1)[1]
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as source:
            cursor = source.execute(QUERY)
            names = [c[0] for c in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    with psycopg.connect(from_url) as source, source.cursor() as cursor:
        cursor.execute(QUERY)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _json(text: Any, default: Any) -> Any:
    if text in (None, ""):
        return default
    return json.loads(text) if isinstance(text, str) else text


def _schedule(row: dict[str, Any]) -> dict[str, Any] | str:
    """The schedule spec, or the reason it cannot be converted."""
    if row["minute"] is not None:
        if row["one_off"]:
            return "one_off on a crontab schedule is not supported (use a clocked schedule)"
        fields = [
            row[k] for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        ]
        return {
            "type": "cron",
            "expression": " ".join(str(f).replace(" ", "") for f in fields),
            "timezone": str(row["timezone"] or "UTC"),
        }
    if row["every"] is not None:
        if row["one_off"]:
            return "one_off on an interval schedule is not supported (use a clocked schedule)"
        unit = INTERVAL_UNITS.get(row["period"])
        if unit is None:
            return f"interval period {row['period']!r} is not supported"
        return {"type": "interval", "expression": f"{int(row['every'])}{unit}"}
    if row["clocked_time"] is not None:
        when = row["clocked_time"]
        if isinstance(when, str):
            when = datetime.fromisoformat(when)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return {"type": "once", "run_at": when.isoformat(), "timezone": "UTC"}
    if row["solar_id"] is not None:
        return "solar schedules (sunrise/sunset) are not supported"
    return "no schedule attached"


def celery_beat_plan(rows: list[dict[str, Any]]) -> ImportReport:
    report = ImportReport()
    now = timezone.now()
    for row in rows:
        name, source_id = str(row["name"]), int(row["id"])
        schedule = _schedule(row)
        if isinstance(schedule, str):
            report.skipped.append(Skipped(source_id, name, schedule))
            continue
        try:
            handler = {
                "type": "celery",
                "task": row["task"],
                "args": _json(row["args"], []),
                "kwargs": _json(row["kwargs"], {}),
                "queue": row["queue"] or DEFAULT_QUEUE,
            }
        except ValueError as error:
            report.skipped.append(Skipped(source_id, name, f"args/kwargs are not JSON: {error}"))
            continue
        description = (row.get("description") or "").strip()
        spec = {
            "name": name,
            "description": (description + "\n" if description else "")
            + f"Imported from django-celery-beat PeriodicTask #{source_id}.",
            "schedule": schedule,
            "handler": handler,
        }
        try:
            task_spec_to_fields(spec, anchor=now)  # validation only: nothing is written
        except DomainError as error:
            field_name = getattr(error, "field", None)
            where = f" ({field_name})" if field_name else ""
            report.skipped.append(Skipped(source_id, name, f"{error}{where}"))
            continue
        report.planned.append(Planned(source_id, name, spec, bool(row["enabled"])))
    return report


def celery_beat_import(
    *, tenant: Tenant, rows: list[dict[str, Any]], dry_run: bool = False
) -> ImportReport:
    """Plan, then (unless `dry_run`) create every convertible task; one transaction."""
    report = celery_beat_plan(rows)
    existing = set(
        TaskDefinition.objects.filter(tenant=tenant, deleted_at__isnull=True).values_list(
            "name", flat=True
        )
    )
    clashing = [p for p in report.planned if p.name in existing]
    for planned in clashing:
        report.skipped.append(
            Skipped(planned.source_id, planned.name, "a task with this name already exists")
        )
    report.planned = [p for p in report.planned if p.name not in existing]
    if dry_run:
        return report
    with transaction.atomic():
        for planned in report.planned:
            task = task_create(tenant=tenant, spec=planned.spec)
            if not planned.enabled:
                task = task_set_enabled(task=task, enabled=False)
            report.created.append(task)
    return report
