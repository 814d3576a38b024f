"""DAG definitions (with versions), DAG runs and per-run node states.

Written only through `dags.services`. Node executions are ordinary TaskExecution rows
(trigger='dag'); the link lives here (`DagNodeExecution`), so no database foreign key
points at the (partitioned) executions table.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils.timezone import now as utc_now

from dags.choices import (
    BackfillReprocess,
    BackfillStatus,
    Catchup,
    EventWaitStatus,
    FailurePolicy,
    FireOutcome,
    NodeAttemptTrigger,
    NodeStatus,
    Overlap,
    RunStatus,
)
from scheduler_app.models import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class Dag(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="dags")
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField(default=1)  # the current DagVersion.number
    schedule_type = models.CharField(max_length=16, default="manual")
    schedule_expression = models.CharField(max_length=255, blank=True, default="")
    timezone = models.CharField(max_length=64, default="UTC")
    run_at = models.DateTimeField(null=True, blank=True)
    failure_policy = models.CharField(
        max_length=24, choices=FailurePolicy.choices, default=FailurePolicy.SKIP_DOWNSTREAM
    )
    max_active_runs = models.PositiveIntegerField(default=16)
    # A run not finished this long after its scheduled time raises `sla_missed` (None: no SLA).
    sla_seconds = models.PositiveIntegerField(null=True, blank=True)
    # `"schedule": {"type": "event", "name", "match"}` (see TaskDefinition.event_trigger).
    event_trigger = models.JSONField(null=True, blank=True)
    catchup = models.CharField(max_length=8, choices=Catchup.choices, default=Catchup.LATEST)
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.ALLOW)
    # The rest of a task's scheduling policy (ARCHITECTURE §6), meaning what it means there.
    jitter_seconds = models.PositiveIntegerField(default=0)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    # The runbook keys of the policy and the pause record, as on TaskDefinition.
    pause_after_failures = models.PositiveIntegerField(null=True, blank=True)
    health_check = models.JSONField(null=True, blank=True)
    remaining_runs = models.PositiveIntegerField(null=True, blank=True)
    owner = models.CharField(max_length=255, blank=True, default="", db_default="")
    consecutive_failures = models.PositiveIntegerField(default=0, db_default=0)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=255, blank=True, default="", db_default="")
    pause_note = models.TextField(blank=True, default="", db_default="")
    # `schedule.exclude` (see TaskDefinition.schedule_exclude).
    schedule_exclude = models.JSONField(default=list, blank=True, db_default=[])
    enabled = models.BooleanField(default=True)
    paused = models.BooleanField(default=False)
    # "api" or "file:<name>": sync_dags only touches what it created.
    source = models.CharField(max_length=255, blank=True, default="api")
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=utc_now)
    updated_at = models.DateTimeField(auto_now=True)
    # Bumped by every service that changes when a DAG fires: the schedulers' change feed, as
    # TaskDefinition.changed_at. Not bumped when the leader advances next_fire_at.
    changed_at = models.DateTimeField(default=utc_now, db_index=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "DAG"
        verbose_name_plural = "DAGs"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(deleted_at__isnull=True),
                name="uniq_dag_name_per_tenant",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                name="idx_dag_next_fire",
                condition=Q(enabled=True, paused=False, deleted_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return self.name


class DagVersion(models.Model):
    """An immutable snapshot of a definition; a run keeps the version it started with."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    dag = models.ForeignKey(Dag, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()  # the validated, normalized definition
    # node id -> TaskDefinition id that runs it (inline handlers get a hidden manual task).
    node_tasks = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=utc_now)

    class Meta:
        verbose_name = "DAG version"
        verbose_name_plural = "DAG versions"
        ordering = ["dag", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dag", "number"], name="uniq_dag_version_number")
        ]

    def __str__(self) -> str:
        return f"{self.dag_id} v{self.number}"


class DagRun(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    dag = models.ForeignKey(Dag, on_delete=models.PROTECT, related_name="runs")
    version = models.ForeignKey(DagVersion, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=24, choices=RunStatus.choices, default=RunStatus.RUNNING)
    trigger = models.CharField(max_length=16, default="manual")
    # Who asked for the run ("user:alice", "apikey:ab12cd34"; "" for the scheduler, an event,
    # a backfill): an approval node of the run refuses its triggerer's decision.
    triggered_by = models.CharField(max_length=255, blank=True, default="", db_default="")
    scheduled_at = models.DateTimeField()
    parameters = models.JSONField(null=True, blank=True)
    # Nodes not yet in a final state; the transaction that takes it to 0 ends the run.
    remaining_nodes = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=utc_now)
    # The W3C trace context of the run's span ("" while tracing is off): every node's
    # execution continues it, so one DAG run is one trace with its nodes as children.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "DAG run"
        verbose_name_plural = "DAG runs"
        ordering = ["-scheduled_at"]
        constraints = [
            # A scheduled fire of a DAG happens once, whichever scheduler records it.
            # (A backfill's run of a fire time counts as that fire.)
            models.UniqueConstraint(
                fields=["dag", "scheduled_at"],
                condition=Q(trigger__in=["schedule", "backfill"]),
                name="uniq_dag_scheduled_fire",
            ),
        ]
        indexes = [
            models.Index(fields=["dag", "-scheduled_at"], name="idx_dagrun_dag_scheduled"),
            models.Index(
                fields=["dag", "created_at"],
                name="idx_dagrun_active",
                condition=Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dag_id} run {self.id}"


class DagNodeState(models.Model):
    """One node of one run. Counters are changed only by conditional UPDATEs."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="nodes")
    node_id = models.CharField(max_length=255)
    status = models.CharField(max_length=24, choices=NodeStatus.choices, default=NodeStatus.WAITING)
    remaining_upstream = models.PositiveIntegerField(default=0)
    upstream_succeeded = models.PositiveIntegerField(default=0)
    upstream_failed = models.PositiveIntegerField(default=0)
    upstream_skipped = models.PositiveIntegerField(default=0)
    # The first attempt of the node's current execution chain (retries point back at it).
    execution_id = models.UUIDField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Fan-out: how many shards there are and how many reached a final state.
    map_total = models.PositiveIntegerField(null=True, blank=True)
    map_finished = models.PositiveIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)
    error_message = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=utc_now)
    # Which attempt of the node in this run the row shows (1, then 2 after a re-run, ...), what
    # started it and who ("user:alice", "api-key:ci"; "" for the engine). Earlier attempts are
    # kept as DagNodeAttempt rows. (`attempts` above counts the tries of one execution chain.)
    # Database defaults too: the existing rows are each their node's first attempt, and an
    # INSERT that names only the columns it fills stays valid.
    attempt_number = models.PositiveSmallIntegerField(default=1, db_default=1)
    attempt_trigger = models.CharField(
        max_length=24,
        choices=NodeAttemptTrigger.choices,
        default=NodeAttemptTrigger.RUN,
        db_default=NodeAttemptTrigger.RUN.value,
    )
    attempt_triggered_by = models.CharField(max_length=255, blank=True, default="", db_default="")

    class Meta:
        verbose_name = "DAG node state"
        verbose_name_plural = "DAG node states"
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "node_id"], name="uniq_dag_node_per_run")
        ]
        indexes = [
            models.Index(
                fields=["updated_at"],
                name="idx_dagnode_mapping",
                condition=Q(map_total__isnull=False, status="running"),
            ),
            # Ready nodes not decided yet (dags.services.undecided): few at any time.
            models.Index(
                fields=["updated_at"],
                name="idx_dagnode_undecided",
                condition=Q(status="waiting", remaining_upstream=0),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} ({self.status})"


class DagNodeExecution(models.Model):
    """Which node (and which shard of a mapped node) an execution chain belongs to."""

    # TaskExecution.root_execution_id of the chain: the first attempt's id.
    execution_root_id = models.UUIDField(primary_key=True)
    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    shard_index = models.PositiveIntegerField(null=True, blank=True)
    # Final state of this chain (for shards: the join reads it), set in the finishing txn.
    status = models.CharField(max_length=24, blank=True, default="")
    result = models.JSONField(null=True, blank=True)

    class Meta:
        verbose_name = "DAG node execution"
        verbose_name_plural = "DAG node executions"
        indexes = [models.Index(fields=["run", "node_id"], name="idx_dagnodeexec_node")]

    def __str__(self) -> str:
        return f"{self.node_id}[{self.shard_index}] {self.execution_root_id}"


class DagNodeAttempt(models.Model):
    """An earlier attempt of a node of a run, kept when the node is run again (the run re-run
    from its failed nodes, or the node's dead letter retried inside the run): what started it,
    which execution chain (or shards) ran it, how and when it ended. Written once, by the
    re-run that superseded it; the node's current attempt is its DagNodeState."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="node_attempts")
    node_id = models.CharField(max_length=255)
    number = models.PositiveSmallIntegerField()
    trigger = models.CharField(
        max_length=24, choices=NodeAttemptTrigger.choices, default=NodeAttemptTrigger.RUN
    )
    triggered_by = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=24, choices=NodeStatus.choices)
    # The first execution of the attempt's chain (TaskExecution.root_execution_id) and how many
    # tries that chain had (a fan-out's shards: its DagNodeAttemptExecution rows).
    execution_id = models.UUIDField(null=True, blank=True)
    execution_attempts = models.PositiveSmallIntegerField(default=0)
    map_total = models.PositiveIntegerField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error_message = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # When a re-run replaced it, and by which trigger (the next attempt's).
    superseded_at = models.DateTimeField(default=utc_now)

    class Meta:
        verbose_name = "DAG node attempt"
        verbose_name_plural = "DAG node attempts"
        ordering = ["run", "node_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "node_id", "number"], name="uniq_dag_node_attempt"
            )
        ]

    def __str__(self) -> str:
        return f"{self.node_id} attempt {self.number} ({self.status})"


class DagNodeAttemptExecution(models.Model):
    """An execution chain an earlier attempt ran: its DagNodeExecution, moved here by the
    re-run that superseded the attempt (the engine's links are the current attempt's only), so
    the pages and the dead-letter queue still name the execution by its DAG, run and node."""

    execution_root_id = models.UUIDField(primary_key=True)
    attempt = models.ForeignKey(DagNodeAttempt, on_delete=models.CASCADE, related_name="executions")
    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    shard_index = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        verbose_name = "DAG node attempt execution"
        verbose_name_plural = "DAG node attempt executions"
        ordering = ["attempt", "shard_index"]

    def __str__(self) -> str:
        return f"{self.node_id}[{self.shard_index}] {self.execution_root_id} (earlier attempt)"


class Backfill(models.Model):
    """Runs of a task's or a DAG's schedule over a past (or future) range, released
    `max_parallel` at a time by the beat leader (`dags.services.backfills`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    # Exactly one of the two.
    task = models.ForeignKey(
        "scheduler_app.TaskDefinition",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    dag = models.ForeignKey(Dag, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    max_parallel = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=BackfillStatus.choices, default=BackfillStatus.RUNNING
    )
    # Fire times of the schedule in [start_at, end_at), counted when it was created.
    total = models.PositiveIntegerField()
    # Fires handed out so far (created, or found already recorded), in order up to `cursor`.
    released = models.PositiveIntegerField(default=0)
    already_recorded = models.PositiveIntegerField(default=0)
    # What it does with a fire that already has a run, and how many it ran again so far.
    reprocess = models.CharField(
        max_length=8, choices=BackfillReprocess.choices, default=BackfillReprocess.NONE
    )
    reprocessed = models.PositiveIntegerField(default=0)
    cursor = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=utc_now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # When a housekeeping round last advanced it: rounds take each tenant's least recently
    # advanced backfill first (dags.services.backfill_rounds).
    advanced_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(task__isnull=False, dag__isnull=True)
                | Q(task__isnull=True, dag__isnull=False),
                name="backfill_task_xor_dag",
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at"],
                name="idx_backfill_running",
                condition=Q(status="running"),
            ),
            models.Index(
                fields=["tenant", "advanced_at"],
                name="idx_backfill_round",
                condition=Q(status="running"),
            ),
            models.Index(fields=["tenant", "-created_at"], name="idx_backfill_tenant"),
        ]

    def __str__(self) -> str:
        return f"backfill {self.id} ({self.status})"


class BackfillRun(models.Model):
    """One fire time a backfill released: the run it created (a task's first execution, or a
    DAG run), or none when the fire was already recorded (the unique key held)."""

    id = models.BigAutoField(primary_key=True)
    backfill = models.ForeignKey(Backfill, on_delete=models.CASCADE, related_name="runs")
    scheduled_at = models.DateTimeField()
    run_id = models.UUIDField(null=True, blank=True)
    # New run, run again (a recorded fire re-run), or why it was skipped.
    outcome = models.CharField(max_length=20, choices=FireOutcome.choices, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["backfill", "scheduled_at"], name="uniq_backfill_fire"),
        ]

    def __str__(self) -> str:
        return f"{self.backfill_id} @ {self.scheduled_at:%Y-%m-%d %H:%M:%S}"


class Event(models.Model):
    """Something that happened outside (`POST /api/v1/events`): it releases the DAG nodes
    waiting for it. Kept per tenant for EVENTS_RETENTION_DAYS."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=255)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=utc_now)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "name", "-created_at"], name="idx_event_tenant_name"),
            models.Index(fields=["created_at"], name="idx_event_created"),
        ]

    def __str__(self) -> str:
        return f"event {self.name} {self.id}"


class EventWait(models.Model):
    """A wait_for_event node of a run, while it waits and after (the run page shows it)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    match = models.JSONField(default=dict)
    # Only events posted at or after this instant count (the run's start).
    since = models.DateTimeField()
    started_at = models.DateTimeField()
    deadline = models.DateTimeField()
    status = models.CharField(
        max_length=16, choices=EventWaitStatus.choices, default=EventWaitStatus.WAITING
    )
    event_id = models.UUIDField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["run", "node_id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "node_id"], name="uniq_event_wait_node"),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "name"],
                name="idx_event_wait_open",
                condition=Q(status="waiting"),
            ),
            models.Index(
                fields=["deadline"],
                name="idx_event_wait_deadline",
                condition=Q(status="waiting"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id} waits for {self.name}"


# Approval nodes', timers' and node joins' rows live in modules of their own; imported here
# so Django finds them.
from dags.approval_models import ApprovalDecision, ApprovalWait  # noqa: E402
from dags.join_models import DagNodeJoin  # noqa: E402
from dags.timer_models import DagTimer  # noqa: E402

__all__ = [
    "ApprovalDecision",
    "ApprovalWait",
    "Backfill",
    "BackfillRun",
    "Dag",
    "DagNodeAttempt",
    "DagNodeAttemptExecution",
    "DagNodeExecution",
    "DagNodeJoin",
    "DagNodeState",
    "DagRun",
    "DagTimer",
    "DagVersion",
    "Event",
    "EventWait",
]
