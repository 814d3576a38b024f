"""The keys of a DAG node that runs something (a handler or a task reference): a node that
only waits (wait_for_event, approval, sleep, sensor) may have none of them."""

from __future__ import annotations

RUNNING_NODE_KEYS = (
    "handler",
    "task",
    "map_over",
    "timeout_seconds",
    "retry_policy",
    "priority",
    "parameters",
    "failure_policy",
    "concurrency",
    "pool",
    "pool_slots",
    "rate_limit",
    "singleton",
    "debounce",
)
# A typed waiting node (approval, sleep, sensor) has no idempotency key and waits for no
# event either.
NOT_FOR_TYPED_WAITS = (*RUNNING_NODE_KEYS, "idempotency_key", "wait_for_event")
