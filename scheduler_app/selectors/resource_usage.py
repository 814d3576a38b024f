"""What a task's recent runs used, what it asks, and what it should ask.

    task_resource_usage(tenant=t, task=task)
        -> {"runs", "cpu_seconds": {"p50", "p95"}, "peak_memory_bytes": {"p50", "p95"},
            "requested": {"cpu_seconds"?, "memory_bytes"?},
            "suggested_resource_requirements": {"cpu_seconds", "memory"} | None}
    overprovisioned_tasks(tenant=t or None)  -> bulk-tier tasks using a tenth or less

Over the task's last RECENT_RUNS executions (the (task, scheduled_at) index read backwards,
bounded whatever the task's history), those whose finish recorded a usage. The suggestion
(the rule the manual states, docs/tasks/sizing.md): p95 x HEADROOM rounded up, CPU to whole
seconds (at least 1), memory to whole MiB, once MIN_RUNS runs are measured.
"""

from __future__ import annotations

import math
from typing import Any

from django.db import connection

from handler_contract.validation import rlimit_requirements
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant

RECENT_RUNS = 200
MIN_RUNS = 5
HEADROOM = 1.3
MIB = 1024**2
# A bulk-tier task is over-provisioned when its runs' p95 use of something it asks for is at
# most this share of the ask.
OVERPROVISIONED_SHARE = 0.1
# Tiers by priority (scheduler_app.choices.tier_for_priority): bulk is 8-10.
BULK_MIN_PRIORITY = 8
MAX_LISTED = 500


def _usage_sql(where: str) -> str:
    executions = TaskExecution._meta.db_table
    return (
        "SELECT count(cpu_seconds), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY cpu_seconds), "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY cpu_seconds), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY peak_memory_bytes), "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY peak_memory_bytes) "
        f"FROM (SELECT cpu_seconds, peak_memory_bytes FROM {executions} e WHERE {where} "
        f"ORDER BY e.scheduled_at DESC LIMIT {RECENT_RUNS}) recent"
    )


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _summary(row: tuple, task: TaskDefinition) -> dict[str, Any]:
    runs, cpu50, cpu95, mem50, mem95 = row
    return {
        "runs": int(runs or 0),
        "cpu_seconds": {"p50": _rounded(cpu50, 3), "p95": _rounded(cpu95, 3)},
        "peak_memory_bytes": {"p50": _rounded(mem50, 0), "p95": _rounded(mem95, 0)},
        "requested": task_requested(task),
        "suggested_resource_requirements": resources_suggest(
            runs=int(runs or 0), cpu_p95=cpu95, memory_p95=mem95
        ),
    }


def task_requested(task: TaskDefinition) -> dict[str, int]:
    """What the task asks of the resources runs are measured in (cpu_seconds, memory_bytes)."""
    config = task.handler_config if isinstance(task.handler_config, dict) else {}
    try:
        limits = rlimit_requirements(config.get("resource_requirements"))
    except (TypeError, ValueError):
        return {}
    return {key: limits[key] for key in ("cpu_seconds", "memory_bytes") if key in limits}


def resources_suggest(
    *, runs: int, cpu_p95: float | None, memory_p95: float | None
) -> dict[str, Any] | None:
    """p95 x HEADROOM rounded up: `cpu_seconds` whole seconds (>= 1), `memory` whole MiB."""
    if runs < MIN_RUNS or cpu_p95 is None:
        return None
    suggested: dict[str, Any] = {"cpu_seconds": max(1, math.ceil(float(cpu_p95) * HEADROOM))}
    if memory_p95:
        suggested["memory"] = f"{max(1, math.ceil(float(memory_p95) * HEADROOM / MIB))}Mi"
    return suggested


def task_resource_usage(*, tenant: Tenant, task: TaskDefinition) -> dict[str, Any]:
    """The task (already resolved in `tenant`: another tenant's is its 404)."""
    with connection.cursor() as cursor:
        cursor.execute(_usage_sql("e.tenant_id = %s AND e.task_id = %s"), [tenant.id, task.id])
        row = cursor.fetchone()
    return _summary(row, task)


def _overprovisioned(usage: dict[str, Any]) -> dict[str, float]:
    """{resource: p95 / ask} for each resource the task asks and uses a tenth or less of."""
    if usage["runs"] < MIN_RUNS:
        return {}
    shares = {}
    requested = usage["requested"]
    for key, used in (
        ("cpu_seconds", usage["cpu_seconds"]["p95"]),
        ("memory_bytes", usage["peak_memory_bytes"]["p95"]),
    ):
        asked = requested.get(key)
        if asked and used is not None and used <= asked * OVERPROVISIONED_SHARE:
            shares[key] = round(used / asked, 4)
    return shares


def overprovisioned_tasks(*, tenant: Tenant | None) -> list[dict[str, Any]]:
    """Bulk-tier tasks that ask for resources and whose recent runs use a tenth or less of
    one of them (p95): those of `tenant`, or of every tenant for a platform admin (None).
    Each: {"task", "usage" (as task_resource_usage), "used_share": {resource: p95/ask}}."""
    tasks = (
        TaskDefinition.objects.for_tenant_or_platform(tenant)
        .select_related("tenant")
        .filter(priority__gte=BULK_MIN_PRIORITY, handler_config__has_key="resource_requirements")
    )
    listed = []
    with connection.cursor() as cursor:
        for task in tasks.order_by("tenant_id", "name")[:MAX_LISTED]:
            if not task_requested(task):
                continue
            cursor.execute(
                _usage_sql("e.tenant_id = %s AND e.task_id = %s"), [task.tenant_id, task.id]
            )
            usage = _summary(cursor.fetchone(), task)
            shares = _overprovisioned(usage)
            if shares:
                listed.append({"task": task, "usage": usage, "used_share": shares})
    return listed
