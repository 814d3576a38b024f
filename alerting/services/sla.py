"""The `sla_missed` rule: a run of a task or DAG with `sla_seconds` that has not finished that
long after its scheduled time.

One incident per run (key `execution:<first attempt id>` or `dag_run:<id>`), so the tenant's
alert channels hear of each late run once; it resolves (and says so) when the run ends. A
task's run is its chain of attempts: its time is the first attempt's `scheduled_at`, and it
is unfinished while any attempt waits or runs. A backfilled run has no SLA (its scheduled
time is a past fire's, so it would always be late). Evaluated with the other rules, every
ALERTS_EVALUATE_SECONDS on the leader.

DAG runs are read here too (the rules are evaluated in one place).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from alerting.models import AlertIncident
from dags.choices import ACTIVE_RUN_STATUSES
from dags.models import DagRun
from scheduler_app.choices import ACTIVE_STATUSES, Trigger
from scheduler_app.models import TaskExecution, Tenant

RULE = "sla_missed"


def _late_task_runs(now: datetime) -> list[dict[str, Any]]:
    active = list(
        TaskExecution.platform.filter(
            status__in=ACTIVE_STATUSES, task__sla_seconds__isnull=False
        ).values(
            "id",
            "root_execution_id",
            "attempt",
            "trigger",
            "scheduled_at",
            "tenant_id",
            "task__name",
            "task__sla_seconds",
        )
    )
    roots = {row["root_execution_id"] for row in active if row["attempt"] > 1}
    firsts = {
        root_id: (scheduled_at, trigger)
        for root_id, scheduled_at, trigger in TaskExecution.platform.filter(
            id__in=roots
        ).values_list("id", "scheduled_at", "trigger")
    }
    late = []
    for row in active:
        root = row["root_execution_id"] or row["id"]
        first = (row["scheduled_at"], row["trigger"]) if row["attempt"] == 1 else firsts.get(root)
        # A backfilled fire is late by design (its time is in the past): no SLA for it.
        if first is None or first[1] == Trigger.BACKFILL:
            continue
        scheduled = first[0]
        sla = row["task__sla_seconds"]
        if scheduled + timedelta(seconds=sla) <= now:
            late.append(
                {
                    "key": f"execution:{root}",
                    "tenant_id": row["tenant_id"],
                    "summary": (
                        f"task {row['task__name']}: the run scheduled at "
                        f"{scheduled:%Y-%m-%d %H:%M:%S} UTC has not finished within its SLA "
                        f"of {sla} s"
                    ),
                    "late_seconds": (now - scheduled).total_seconds() - sla,
                }
            )
    return late


def _late_dag_runs(now: datetime) -> list[dict[str, Any]]:
    rows = (
        DagRun.platform.filter(status__in=ACTIVE_RUN_STATUSES, dag__sla_seconds__isnull=False)
        .exclude(trigger=Trigger.BACKFILL)
        .values("id", "tenant_id", "scheduled_at", "dag__name", "dag__sla_seconds")
    )
    late = []
    for row in rows:
        sla = row["dag__sla_seconds"]
        if row["scheduled_at"] + timedelta(seconds=sla) <= now:
            late.append(
                {
                    "key": f"dag_run:{row['id']}",
                    "tenant_id": row["tenant_id"],
                    "summary": (
                        f"DAG {row['dag__name']}: the run scheduled at "
                        f"{row['scheduled_at']:%Y-%m-%d %H:%M:%S} UTC has not finished within "
                        f"its SLA of {sla} s"
                    ),
                    "late_seconds": (now - row["scheduled_at"]).total_seconds() - sla,
                }
            )
    return late


def sla_missed(now: datetime) -> list[dict[str, Any]]:
    """Every run past its SLA and not finished, as {key, tenant_id, summary, late_seconds}."""
    return _late_task_runs(now) + _late_dag_runs(now)


def sla_misses_list(*, tenant: Tenant, since: datetime) -> QuerySet[AlertIncident]:
    """The tenant's SLA misses still open, or opened since `since` (the dashboard)."""
    return AlertIncident.objects.filter(tenant=tenant, rule=RULE).filter(
        Q(resolved_at__isnull=True) | Q(opened_at__gte=since)
    )
