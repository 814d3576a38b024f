"""The definitions the schedule engine fires: tasks and DAGs, from one heap.

Both store the same schedule and policy fields (type, expression, zone, run_at, catchup,
overlap, jitter_seconds, start_at, end_at, next_fire_at) and the same change feed
(`changed_at`), so one engine follows, shards and expands both; only what a fire does
differs (an execution row for a task, a DAG run for a DAG). A DAG's entry carries no
priority or queue: its nodes' tasks have their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import models
from django.db.models import Value

from dags.models import Dag
from scheduler_app.choices import ScheduleType
from scheduler_app.models import TaskDefinition

TASK = "task"
DAG = "dag"

_SCHEDULE_FIELDS = (
    "id",
    "tenant_id",
    "schedule_type",
    "schedule_expression",
    "timezone",
    "run_at",
    "created_at",
    "next_fire_at",
    "changed_at",
    "enabled",
    "paused",
    "deleted_at",
    "catchup",
    "overlap",
    "jitter_seconds",
    "start_at",
    "end_at",
    "schedule_exclude",
)


@dataclass(frozen=True)
class Source:
    kind: str
    model: type[models.Model]
    fields: tuple[str, ...]
    # What an entry of this kind needs beyond its schedule, when the rows do not hold it.
    defaults: tuple[tuple[str, object], ...] = ()

    def schedulable(self) -> models.QuerySet:
        return self.model.platform.filter(
            enabled=True, paused=False, deleted_at__isnull=True
        ).exclude(schedule_type=ScheduleType.MANUAL)

    def changed_since(self, since) -> models.QuerySet:
        """(id, changed_at, kind) of the rows changed since `since`."""
        return (
            self.model.platform.filter(changed_at__gte=since)
            .annotate(kind=Value(self.kind, output_field=models.CharField()))
            .values_list("id", "changed_at", "kind")
        )


SOURCES = (
    Source(TASK, TaskDefinition, (*_SCHEDULE_FIELDS, "priority", "capability", "max_attempts")),
    Source(
        DAG,
        Dag,
        _SCHEDULE_FIELDS,
        defaults=(("priority", 5), ("capability", ""), ("max_attempts", 1)),
    ),
)
BY_KIND = {source.kind: source for source in SOURCES}


def changed_window(since) -> models.QuerySet:
    """One query for the change feed's window over every source: (id, changed_at, kind)."""
    first, *rest = (source.changed_since(since) for source in SOURCES)
    return first.union(*rest, all=True)


def rows_of(source: Source, values: Iterable[tuple]) -> Iterator[dict]:
    """Engine rows (dicts with `kind` and the source's defaults) from `source.fields` tuples."""
    extra = {"kind": source.kind, **dict(source.defaults)}
    for values_of_row in values:
        row = dict(zip(source.fields, values_of_row, strict=True))
        row.update(extra)
        yield row
