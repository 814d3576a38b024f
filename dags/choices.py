"""Every enumeration of the DAG engine in one place."""

from __future__ import annotations

from django.db import models

# DAG schedules share the tasks' catch-up and overlap semantics, and so their choices.
from scheduler_app.choices import Catchup, Overlap

__all__ = [
    "ApprovalInterface",
    "ApprovalVerdict",
    "ApprovalWaitStatus",
    "BackfillStatus",
    "Catchup",
    "EventWaitStatus",
    "FailurePolicy",
    "NodeAttemptTrigger",
    "NodeStatus",
    "Overlap",
    "RunStatus",
    "TimerKind",
    "TimerStatus",
    "TriggerRule",
]


class FailurePolicy(models.TextChoices):
    SKIP_DOWNSTREAM = "skip_downstream"
    FAIL_ALL = "fail_all"
    CONTINUE = "continue"
    # The failed node is retried under the retry policy, then the run goes on as
    # skip_downstream.
    RETRY = "retry"


class TriggerRule(models.TextChoices):
    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    ONE_SUCCESS = "one_success"


class RunStatus(models.TextChoices):
    QUEUED = "queued"  # waiting for a max_active_runs slot
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    PARTIALLY_COMPLETED = "partially_completed"
    CANCELLED = "cancelled"


class NodeStatus(models.TextChoices):
    WAITING = "waiting"
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    UPSTREAM_FAILED = "upstream_failed"
    # A wait_for_event node: no execution, no worker slot; an event or its timeout ends it.
    WAITING_FOR_EVENT = "waiting_for_event"
    # A sleep or a sensor node: no execution, no worker slot; a DagTimer row ends it.
    SLEEPING = "sleeping"
    SENSING = "sensing"
    # An approval node: no execution, no worker slot; its approvers' decisions or its timeout
    # end it (dags.services.approvals).
    WAITING_FOR_APPROVAL = "waiting_for_approval"


class NodeAttemptTrigger(models.TextChoices):
    """What started an attempt of a node in its run."""

    RUN = "run"  # the run reached it (its first attempt)
    RERUN = "rerun"  # the run was re-run from its failed nodes
    DEAD_LETTER_RETRY = "dead_letter_retry"  # a node's dead letter was retried inside the run
    CLEAR = "clear"  # an operator cleared it (or a node up- or downstream of it)
    MARK = "mark"  # an operator marked it (or a node upstream of it) succeeded or failed


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
ACTIVE_NODE_STATUSES = (
    NodeStatus.WAITING,
    NodeStatus.PENDING,
    NodeStatus.QUEUED,
    NodeStatus.RUNNING,
    NodeStatus.WAITING_FOR_EVENT,
    NodeStatus.SLEEPING,
    NodeStatus.SENSING,
    NodeStatus.WAITING_FOR_APPROVAL,
)
# What a downstream node's trigger rule sees of an upstream that ended.
FAILED_NODE_STATUSES = (
    NodeStatus.FAILED,
    NodeStatus.TIMED_OUT,
    NodeStatus.CANCELLED,
    NodeStatus.UPSTREAM_FAILED,
)


class EventWaitStatus(models.TextChoices):
    WAITING = "waiting"
    RECEIVED = "received"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"  # its run ended another way first


class ApprovalWaitStatus(models.TextChoices):
    WAITING = "waiting"
    APPROVED = "approved"  # the quorum approved, or the timeout's on_timeout approved
    REJECTED = "rejected"  # an approver rejected, or the timeout's on_timeout rejected
    SKIPPED = "skipped"  # the timeout's on_timeout skipped the node
    CANCELLED = "cancelled"  # its run ended another way first


class ApprovalVerdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class ApprovalInterface(models.TextChoices):
    """Where a decision was made (the audit log and the run page say it)."""

    API = "api"
    DASHBOARD = "dashboard"
    CLI = "cli"  # schedctl, through the API (it says so in a header)
    LINK = "link"  # the signed link of the announcement


class BackfillStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class BackfillReprocess(models.TextChoices):
    """What a backfill does with a fire that already has a run (Airflow's
    `--reprocess-behavior`): leave it, run it again when that run did not succeed, or run
    every one of them again."""

    NONE = "none", "Only fires without a run"
    FAILED = "failed", "Also run again the fires whose run failed"
    ALL = "all", "Run every fire again, succeeded ones too"


class FireOutcome(models.TextChoices):
    """What a backfill does (or did) with one fire time."""

    NEW = "new", "new run"
    RERUN = "rerun", "run again"
    SKIPPED_SUCCEEDED = "skipped_succeeded", "skipped (already succeeded)"
    SKIPPED_RUNNING = "skipped_running", "skipped (still running)"
    SKIPPED_RECORDED = "skipped_recorded", "skipped (already recorded)"


class TimerKind(models.TextChoices):
    SLEEP = "sleep"
    SENSOR = "sensor"


class TimerStatus(models.TextChoices):
    WAITING = "waiting"  # due_at is the wake-up (sleep) or the next poke (sensor)
    FIRED = "fired"  # the sleep woke, or the sensor's condition held
    TIMED_OUT = "timed_out"  # the sensor's deadline passed (its on_timeout applied)
    FAILED = "failed"  # refused for good (a private target, a bad `until`, a bad secret)
    CANCELLED = "cancelled"  # its run ended another way first
