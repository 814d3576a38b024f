"""Every enumeration of the scheduler in one place."""

from __future__ import annotations

from django.db import models

# The tag of the hidden task definitions that run inline DAG nodes: they belong to their
# DAG (reachable through it), not to the tenant's task lists.
DAG_NODE_TAG = "dag-node"


class ScheduleType(models.TextChoices):
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"
    MANUAL = "manual"


# The design document's word for a one-shot delayed task (its SQL: "cron, interval,
# one-shot"), accepted beside ours; a task reads back with ours.
SCHEDULE_TYPE_SPELLINGS = {"one-shot": ScheduleType.ONCE}
SCHEDULE_TYPES_ACCEPTED = (*ScheduleType.values, *SCHEDULE_TYPE_SPELLINGS)


class HandlerType(models.TextChoices):
    SHELL = "shell"
    HTTP = "http"
    PYTHON = "python"
    CONTAINER = "container"
    CELERY = "celery"


class Backoff(models.TextChoices):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"
    EXPONENTIAL_JITTER = "exponential_jitter"


class ExecutionStatus(models.TextChoices):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


# The design document's words for execution states, accepted where states are filtered
# (its integration test waits for `completed`; ours is `success`).
STATUS_SPELLINGS = {"completed": ExecutionStatus.SUCCESS}

ACTIVE_STATUSES = (ExecutionStatus.PENDING, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)
WAITING_STATUSES = (ExecutionStatus.PENDING, ExecutionStatus.QUEUED)
TERMINAL_STATUSES = (
    ExecutionStatus.SUCCESS,
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.SKIPPED,
)
RETRYABLE_STATUSES = (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT)


class Trigger(models.TextChoices):
    SCHEDULE = "schedule"
    MANUAL = "manual"
    RETRY = "retry"
    DAG = "dag"
    BACKFILL = "backfill"
    EVENT = "event"
    # A retry the runbook started after a task's failures crossed pause_after_failures.
    RUNBOOK = "runbook"
    # An operator's re-run of an ended run (same or edited parameters): a new chain whose
    # `retry_of_id` names the run it re-ran (the API's `rerun_of`).
    RERUN = "rerun"


class Role(models.TextChoices):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class Tier(models.TextChoices):
    CRITICAL = "critical"
    NORMAL = "normal"
    BULK = "bulk"


def tier_for_priority(priority: int) -> str:
    """Priority 1 is the most urgent: 1-3 critical, 4-7 normal, 8-10 bulk."""
    if priority <= 3:
        return Tier.CRITICAL.value
    if priority <= 7:
        return Tier.NORMAL.value
    return Tier.BULK.value


TIERS = (Tier.CRITICAL.value, Tier.NORMAL.value, Tier.BULK.value)


class Catchup(models.TextChoices):
    """What a scheduler that was down does with the fires it missed (inside the window)."""

    NONE = "none"
    LATEST = "latest"
    ALL = "all"


class Overlap(models.TextChoices):
    """What a fire does while an earlier run of the same task is still active."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    CANCEL_OTHER = "cancel_other"
