from __future__ import annotations

import uuid

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform

from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.models.task_definition import TaskDefinition
from scheduler_app.models.tenant import Tenant
from scheduler_app.task_names import task_display_name
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class TaskExecution(models.Model):
    """One attempt of one fire of a task.

    Designed for range partitioning by `scheduled_at` on PostgreSQL: no database
    foreign key points at this table (references use db_constraint=False), and hot
    queries filter by `scheduled_at` or use the partial index on active states.
    State transitions happen only in `services.executions` as conditional UPDATEs.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No single-column indexes: (tenant, scheduled_at) and (task, scheduled_at, attempt) serve
    # those lookups, and every extra index is written again by each of a run's state changes.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    task = models.ForeignKey(
        TaskDefinition, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE)
    priority = models.PositiveSmallIntegerField(default=5)
    queue = models.CharField(max_length=64, default="normal")

    scheduled_at = models.DateTimeField()
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    attempt = models.PositiveSmallIntegerField(default=1)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    # The first attempt of this fire; every retry points back at it.
    root_execution_id = models.UUIDField(null=True, blank=True, db_index=True)
    retry_of_id = models.UUIDField(null=True, blank=True)

    worker_id = models.CharField(max_length=255, blank=True, default="")
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    # Parameters given at trigger time, merged over the definition's.
    parameters = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error_message = models.TextField(blank=True, default="")
    error_class = models.CharField(max_length=64, blank=True, default="")
    # The last progress the handler reported, {percent, message, updated_at}; stored when the
    # run ends (while it runs the live value is in Redis, see scheduler_app.progress).
    progress = models.JSONField(null=True, blank=True)
    # What the attempt used, stored by its finish (the same statement): CPU seconds (user +
    # system) and peak memory (resident, bytes). Null where nothing measured it (an http or
    # celery handler, a lost worker's attempt). See docs/tasks/sizing.md.
    cpu_seconds = models.FloatField(null=True, blank=True)
    peak_memory_bytes = models.BigIntegerField(null=True, blank=True)

    # The rendered idempotency key of this fire ("" when its task has none); retries share
    # it. A run skipped because the key had already succeeded names that earlier execution.
    # A database default: fires and DAG runs insert executions in raw SQL that names only
    # the columns it sets.
    idempotency_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    skipped_for_execution_id = models.UUIDField(null=True, blank=True)
    # Flow control on the trigger side (services.flow_triggers): the rendered singleton or
    # debounce key ("" for none), how many triggers this run answered (a singleton's repeats,
    # a debounce's collapsed triggers), and a debounced run's latest start (its first trigger
    # plus max_wait_seconds: later triggers push scheduled_at forward up to there only).
    singleton_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    debounce_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    trigger_count = models.PositiveIntegerField(default=1, db_default=1)
    debounce_until = models.DateTimeField(null=True, blank=True)

    # The W3C trace context this run continues ("00-<trace id>-<span id>-<flags>"): the
    # fire's span, written with the fire's INSERT, so the worker that claims it (from a
    # doorbell that may ring many runs) parents its spans there. "" while tracing is off.
    # A database default, as for idempotency_key: the raw-SQL inserts name their columns.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")

    # Flow control (`scheduler_app.services.flow_admission`): what a running run holds
    # ({counter key: slots}), set by its admission; why a pending run waits (kind, key,
    # running, max), and when it is looked at again.
    flow_holds = models.JSONField(null=True, blank=True)
    waiting_for = models.JSONField(null=True, blank=True)
    flow_wake_at = models.DateTimeField(null=True, blank=True)
    dead_lettered = models.BooleanField(default=False)
    dead_lettered_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "execution"
        verbose_name_plural = "executions"
        ordering = ["-scheduled_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "scheduled_at", "attempt"], name="uniq_exec_task_fire_attempt"
            ),
        ]
        indexes = [
            # A task's executions by time: uniq_exec_task_fire_attempt serves them (scanned
            # backwards for newest first); a second index would only cost writes.
            models.Index(
                fields=["status", "scheduled_at"],
                name="idx_exec_status_scheduled",
                condition=Q(status__in=["pending", "queued", "running"]),
            ),
            models.Index(fields=["tenant", "-scheduled_at"], name="idx_exec_tenant_scheduled"),
            # The quota check counts a tenant's running runs on every claim.
            models.Index(
                fields=["tenant"],
                name="idx_exec_tenant_running",
                condition=Q(status="running"),
            ),
            models.Index(
                fields=["tenant", "-completed_at"],
                name="idx_exec_dead_letter",
                condition=Q(dead_lettered=True),
            ),
            # Flow control counts what the running runs of a key hold, at every limited claim
            # (and the queued ones a lost worker's requeue kept their slots for).
            GinIndex(
                fields=["flow_holds"],
                name="idx_exec_flow_holds_held",
                condition=Q(status__in=["running", "queued"], flow_holds__isnull=False),
            ),
            # A flow key's waiting runs, oldest first: woken when its slots come free.
            models.Index(
                F("tenant"),
                KeyTextTransform("key", "waiting_for"),
                F("scheduled_at"),
                name="idx_exec_flow_waiting",
                condition=Q(status="pending", waiting_for__isnull=False),
            ),
            # "Has this task's key already succeeded?", asked before a keyed run starts.
            models.Index(
                fields=["task", "idempotency_key"],
                name="idx_exec_idempotent_success",
                condition=Q(status="success") & ~Q(idempotency_key=""),
            ),
            # A singleton's active run of a key, and a debounce's pending run of a key, looked
            # up under the key's advisory lock by every trigger of such a task. Not unique: the
            # table is partitioned by scheduled_at, and a unique index there must hold it.
            models.Index(
                fields=["task", "singleton_key"],
                name="idx_exec_singleton_active",
                condition=Q(status__in=["pending", "queued", "running"]) & ~Q(singleton_key=""),
            ),
            models.Index(
                fields=["task", "debounce_key"],
                name="idx_exec_debounce_pending",
                condition=Q(status="pending") & ~Q(debounce_key=""),
            ),
        ]

    def __str__(self) -> str:
        """The admin's title of a run: whose, when, how it ended, and a short id to search
        by ("nightly-report · 2026-12-03 02:00:00 UTC · failed · 1a2b3c4d")."""
        fired = f"{self.scheduled_at:%Y-%m-%d %H:%M:%S} UTC" if self.scheduled_at else "unscheduled"
        attempt = f" · attempt {self.attempt}" if self.attempt and self.attempt > 1 else ""
        return (
            f"{task_display_name(self.task.name)} · {fired} · {self.status}{attempt}"
            f" · {str(self.id)[:8]}"
        )

    @property
    def schedule_lag_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.started_at - self.scheduled_at).total_seconds()


class LogHour(models.Func):
    """The hour a log was written in, from its created_at: `date_bin` (immutable, so an index
    may hold it; one index key per hour, where the bare times would be one per log)."""

    function = "date_bin"
    template = (
        "date_bin('1 hour'::interval, %(expressions)s, '2001-01-01 00:00:00+00'::timestamptz)"
    )
    output_field = models.DateTimeField()


class ExecutionLogManager(TenantScopedManager):
    """Logs without their `words`: only the search reads them (in SQL), and a stored log's
    tsvector can be as large as its text. Tenant-scoped, as every tenant-owned model."""

    def get_queryset(self) -> models.QuerySet[ExecutionLog]:
        return super().get_queryset().defer("words")


class PlatformExecutionLogManager(PlatformManager):
    """`ExecutionLog.platform`: every tenant's logs (the worker's finish, retention), without
    their `words` either."""

    def get_queryset(self) -> models.QuerySet[ExecutionLog]:
        return super().get_queryset().defer("words")


class ExecutionLog(models.Model):
    """The captured output of one execution, persisted when it ends (capped, masked)."""

    execution_id = models.UUIDField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    text = models.TextField(blank=True, default="")
    size_bytes = models.BigIntegerField(default=0)
    truncated = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # The words of the log's first SEARCHABLE_CHARS characters, for log search: written by
    # PostgreSQL whenever the text is (a trigger, migration 0019), whichever writer stores
    # it (a finish, a batch of finishes, the ORM). Stored, so a search checks each candidate
    # log against a parsed tsvector instead of parsing up to 256 KB of text per row.
    words = SearchVectorField(null=True, editable=False)

    objects = ExecutionLogManager()
    platform = PlatformExecutionLogManager()

    class Meta:
        verbose_name = "execution log"
        verbose_name_plural = "execution logs"
        indexes = [
            # Log search (scheduler_app.selectors.log_search) on the stored words.
            GinIndex(fields=["words"], name="idx_log_search_words"),
            # A recent window of one tenant's logs (log_search_pages), combined with the
            # words' index in one bitmap. Not one GIN over both: that needs btree_gin, which
            # the embedded PostgreSQL of `make run` does not ship.
            models.Index(F("tenant"), LogHour("created_at"), name="idx_log_tenant_hour"),
        ]

    def __str__(self) -> str:
        return f"log {self.execution_id}"
