"""What a worker can run, advertised in the fleet registry, and what a task needs.

A worker offers a handler type when it has what that type needs: every worker runs shell,
http, python and celery handlers; `container` needs a container runtime on the worker
(CONTAINER_RUNTIME naming a docker or podman binary it can find); `egress` (shell runs with
`"network": "egress"`) is offered unless WORKER_SHELL_EGRESS is off. The API reads the live
workers' offers to warn, when a task is saved, that no worker can run it yet.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from handler_contract.validation import SUPPORTED_CONTAINER_RUNTIMES
from scheduler_app.capabilities import (
    CONTAINER,
    EGRESS,
    PARTIAL_CAPABILITIES,
    capability_of_handler,
)
from scheduler_app.choices import TIERS
from scheduler_app.fleet.registry import STATE_ACTIVE, worker_records
from scheduler_app.tenant_pools import tenant_pool_tier

ALWAYS_OFFERED = ("shell", "http", "python", "celery")


def offered_capabilities(*, container_runtime: str | None, egress: bool = True) -> list[str]:
    """The capabilities of a worker process with this configuration."""
    offered = list(ALWAYS_OFFERED)
    runtime = (container_runtime or "").strip()
    name = runtime.rsplit("/", 1)[-1]
    if runtime and name in SUPPORTED_CONTAINER_RUNTIMES and shutil.which(runtime):
        offered.append(CONTAINER)
    if egress:
        offered.append(EGRESS)
    return offered


def worker_capabilities() -> list[str]:
    """This worker's capabilities, from its settings."""
    return offered_capabilities(
        container_runtime=settings.WORKER["CONTAINER_RUNTIME"],
        egress=settings.WORKER["SHELL_EGRESS"],
    )


def capability_queues_to_consume(consumed: list[str], offered: list[str]) -> list[str]:
    """For each tier queue this worker consumes, the queues of the partial capabilities it
    offers (`normal` and `container` -> `normal.container`)."""
    return [
        f"{queue}.{capability}"
        for queue in consumed
        # A tenant's own tier (`tenant.acme.normal`) has its capability queues as a tier does.
        if queue in TIERS or tenant_pool_tier(queue) is not None
        for capability in offered
        if capability in PARTIAL_CAPABILITIES
    ]


def required_capability(handler_config: Mapping[str, Any]) -> str:
    """The capability a handler needs: a partial one (container, egress), else its type."""
    return capability_of_handler(handler_config) or str(handler_config.get("type") or "")


def live_capabilities(now: float | None = None) -> set[str]:
    """Everything some live, active worker offers now."""
    now = time.time() if now is None else now
    offered: set[str] = set()
    for record in worker_records():
        if record.state == STATE_ACTIVE and not record.is_overdue(now):
            offered.update(record.capabilities)
    return offered


def task_warnings(handler_config: Mapping[str, Any]) -> list[str]:
    """Why a saved task may not run yet (empty when a live worker can run it)."""
    needed = required_capability(handler_config)
    if needed in live_capabilities():
        return []
    return [
        f"no live worker offers {needed!r} now; the task is saved and its runs wait for a "
        "worker that does"
        + (" (a worker with CONTAINER_RUNTIME set)" if needed == CONTAINER else "")
        + (" (a worker with WORKER_SHELL_EGRESS on)" if needed == EGRESS else "")
    ]
