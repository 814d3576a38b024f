"""Which queue a run goes to, so that only workers able to run it receive it.

Every worker runs shell, http, python and celery handlers; a capability only some workers
have gets queues of its own, one per tier (`normal.container`), which only workers offering
it consume (workers.fleet_membership):
* `container`: a container runtime on the worker;
* `egress`: shell runs with `"network": "egress"`. A deployment may keep them off the workers
  that sit next to its data (Kubernetes: the `worker-egress` pool, whose pods the Redis and
  PostgreSQL policies do not admit as data clients; its other workers set
  WORKER_SHELL_EGRESS=off and never take one).
A run that needs one waits there for such a worker, up to SCHEDULER_CAPABILITY_WAIT_SECONDS;
then it ends `failed` with error_class `no_capable_worker` (services.capability_waits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler_app.choices import TIERS, tier_for_priority

# Capabilities that not every worker offers.
CONTAINER = "container"
EGRESS = "egress"
PARTIAL_CAPABILITIES = (CONTAINER, EGRESS)


def capability_of_handler(handler_config: Mapping[str, Any]) -> str:
    """The partial capability a validated handler config needs ("" for none). Stored with
    the task (`TaskDefinition.capability`) so that routing reads a column, not the config."""
    kind = handler_config.get("type")
    if kind == CONTAINER:
        return CONTAINER
    if kind == "shell" and handler_config.get("network") == EGRESS:
        return EGRESS
    return ""


def queue_for(*, priority: int, capability: str) -> str:
    tier = tier_for_priority(priority)
    return f"{tier}.{capability}" if capability in PARTIAL_CAPABILITIES else tier


def capability_queues(capability: str) -> list[str]:
    return [f"{tier}.{capability}" for tier in TIERS]


def capability_of_queue(queue: str) -> str | None:
    tier, _, capability = queue.partition(".")
    return capability if tier in TIERS and capability in PARTIAL_CAPABILITIES else None
