"""Runs sized from what they used, as a person reads it (MiB, seconds): the task page's
panel, and the rows of the operations page (`sizing_page`). docs/tasks/sizing.md."""

from __future__ import annotations

from typing import Any

from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.selectors.resource_usage import (
    HEADROOM,
    RECENT_RUNS,
    task_resource_usage,
)

MIB = 1024**2


def mib(value: float | None) -> str:
    return "–" if value is None else f"{value / MIB:,.1f} MiB"


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f} s"


def resources_panel(*, tenant: Tenant, task: TaskDefinition) -> dict[str, Any]:
    """The task page's figures, formatted (a person reads MiB, not bytes)."""
    usage = task_resource_usage(tenant=tenant, task=task)
    requested = usage["requested"]
    return {
        "runs": usage["runs"],
        "recent": RECENT_RUNS,
        "headroom": HEADROOM,
        "cpu": {key: seconds(usage["cpu_seconds"][key]) for key in ("p50", "p95")},
        "memory": {key: mib(usage["peak_memory_bytes"][key]) for key in ("p50", "p95")},
        "requested_cpu": seconds(requested.get("cpu_seconds")),
        "requested_memory": mib(requested.get("memory_bytes")),
        "suggested": usage["suggested_resource_requirements"],
    }
