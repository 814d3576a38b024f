"""Which queue a run goes to, so that only workers able to run it receive it.

Every worker runs shell, http, python and celery handlers; a capability only some workers
have (`container`: a container runtime) gets queues of its own, one per tier
(`normal.container`), which only workers offering it consume (workers.fleet_membership). A run
that needs it waits there for such a worker, up to SCHEDULER_CAPABILITY_WAIT_SECONDS; then it
ends `failed` with error_class `no_capable_worker` (services.capability_waits).
"""

from __future__ import annotations

from scheduler_app.choices import TIERS, tier_for_priority

# Capabilities that not every worker offers.
PARTIAL_CAPABILITIES = ("container",)


def queue_for(*, priority: int, handler_type: str) -> str:
    tier = tier_for_priority(priority)
    return f"{tier}.{handler_type}" if handler_type in PARTIAL_CAPABILITIES else tier


def capability_queues(capability: str) -> list[str]:
    return [f"{tier}.{capability}" for tier in TIERS]


def capability_of_queue(queue: str) -> str | None:
    tier, _, capability = queue.partition(".")
    return capability if tier in TIERS and capability in PARTIAL_CAPABILITIES else None
