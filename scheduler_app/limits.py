"""The numeric limits of a task definition, in one place.

The API serializers (and so the OpenAPI schema) and the services' validation both read
them here, so what the schema advertises is what a request may send.
"""

from __future__ import annotations

from django.conf import settings

from budgets.limits import ExpressionBudget

# The API's hard cap on a task's timeout; an installation lowers it with
# SCHEDULER_MAX_TASK_TIMEOUT (what its broker's visibility timeout is sized for).
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
MAX_ATTEMPTS = 100
MAX_DELAY_SECONDS = 30 * 86400
MAX_JITTER_SECONDS = 3600
PRIORITY_HIGHEST = 1
PRIORITY_LOWEST = 10


def task_timeout_limit() -> int:
    """The longest timeout a task may have here: SCHEDULER_MAX_TASK_TIMEOUT, never above
    the API's hard cap."""
    configured = getattr(settings, "SCHEDULER_MAX_TASK_TIMEOUT", None)
    return min(int(configured), MAX_TIMEOUT_SECONDS) if configured else MAX_TIMEOUT_SECONDS


def expression_budget() -> ExpressionBudget:
    """The budget of every path and template a tenant writes (EXPRESSION_BUDGET)."""
    configured = settings.EXPRESSION_BUDGET
    return ExpressionBudget(
        max_chars=configured["MAX_CHARS"],
        max_segments=configured["MAX_SEGMENTS"],
        max_nodes=configured["MAX_NODES"],
        cpu_seconds=configured["CPU_SECONDS"],
        max_output_chars=configured["MAX_OUTPUT_CHARS"],
    )
