from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.timezone import now as utc_now

from scheduler_app.choices import Backoff, Catchup, HandlerType, Overlap, ScheduleType
from scheduler_app.models.tenant import Tenant
from scheduler_app.task_names import task_display_name
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class TaskDefinition(models.Model):
    """What to run and when. Written only through `services.task_definitions`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="tasks")
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")

    schedule_type = models.CharField(max_length=16, choices=ScheduleType.choices)
    schedule_expression = models.CharField(max_length=255, blank=True, default="")
    timezone = models.CharField(max_length=64, default="UTC")
    run_at = models.DateTimeField(null=True, blank=True)

    handler_type = models.CharField(max_length=16, choices=HandlerType.choices)
    handler_config = models.JSONField(default=dict)
    # What only some workers offer (scheduler_app.capabilities: "container", "egress"; ""
    # for none), from the handler config: its runs go to that capability's queues.
    capability = models.CharField(max_length=16, blank=True, default="", db_default="")
    parameters = models.JSONField(default=dict, blank=True)
    timeout_seconds = models.PositiveIntegerField(default=300)

    max_attempts = models.PositiveSmallIntegerField(default=3)
    backoff = models.CharField(max_length=24, choices=Backoff.choices, default=Backoff.EXPONENTIAL)
    base_delay_seconds = models.FloatField(default=10.0)
    max_delay_seconds = models.FloatField(default=3600.0)

    priority = models.PositiveSmallIntegerField(default=5)
    # A run not finished this long after its scheduled time raises `sla_missed` (None: no SLA).
    sla_seconds = models.PositiveIntegerField(null=True, blank=True)
    # `"schedule": {"type": "event", "name", "match"}`: each matching posted event starts a run
    # (stored as a manual schedule, so nothing fires on time); None for time schedules.
    event_trigger = models.JSONField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    paused = models.BooleanField(default=False)
    tags = models.JSONField(default=list, blank=True)
    notifications = models.JSONField(default=dict, blank=True)
    # A template over a run's parameters and time (scheduler_app.run_key_templates); a run
    # whose key already succeeded for this task is skipped. "" = no key (also the database's
    # default: bulk loads such as the benchmarks' COPY name only the columns they fill).
    idempotency_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Flow control on the trigger side (scheduler_app.flow_trigger_spec): {"key"} for at most
    # one active run per key, {"key", "seconds", "max_wait_seconds"} to collapse a key's
    # triggers into one run. None: off.
    singleton = models.JSONField(null=True, blank=True)
    debounce = models.JSONField(null=True, blank=True)

    # Scheduling policies (ARCHITECTURE §6).
    catchup = models.CharField(max_length=8, choices=Catchup.choices, default=Catchup.LATEST)
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.ALLOW)
    jitter_seconds = models.PositiveIntegerField(default=0)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    # The runbook (ARCHITECTURE §6, "Task failing repeatedly"): after this many consecutive
    # failed runs, check `health_check` (an http GET) and retry once or pause. None: never.
    pause_after_failures = models.PositiveIntegerField(null=True, blank=True)
    health_check = models.JSONField(null=True, blank=True)
    # Fires left before the schedule pauses itself (None: no limit).
    remaining_runs = models.PositiveIntegerField(null=True, blank=True)
    # Who is told when the runbook pauses it: "user:<username>" or a notification target.
    owner = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Failed runs since the last success (DLQ entries included); the runbook's counter.
    consecutive_failures = models.PositiveIntegerField(default=0, db_default=0)
    # Why it is paused: when, by whom ("user:<name>", "apikey:<prefix>", "runbook",
    # "remaining_runs") and the note they left. Cleared on resume.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=255, blank=True, default="", db_default="")
    pause_note = models.TextField(blank=True, default="", db_default="")
    # `schedule.exclude`: calendar exclusions in their canonical form (schedules.exclusions):
    # fire times on these days, matching these crons or on these public holidays are skipped.
    schedule_exclude = models.JSONField(default=list, blank=True, db_default=[])
    # Concurrency keys, pool and rate limits (`scheduler_app.flow_spec`, normalized); {} for a
    # task without any, which the claim tests in Python and so pays nothing for.
    flow_control = models.JSONField(default=dict, blank=True, db_default={})

    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Not auto_now_add: the service sets it, and interval schedules are anchored on it.
    created_at = models.DateTimeField(default=utc_now)
    updated_at = models.DateTimeField(auto_now=True)
    # Bumped by every service that changes what or when a task fires: the schedulers'
    # change feed. Not bumped when the leader advances next_fire_at.
    changed_at = models.DateTimeField(db_index=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(deleted_at__isnull=True),
                name="uniq_task_name_per_tenant",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=1) & Q(priority__lte=10), name="task_priority_1_10"
            ),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="task_attempts_min_1"),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                name="idx_task_next_fire",
                condition=Q(enabled=True, paused=False, deleted_at__isnull=True),
            ),
            # The beat's per-batch probe for limited tasks (`services.remaining_runs`): only
            # the few tasks with a count are in it.
            models.Index(
                fields=["id"],
                name="idx_task_remaining_runs",
                condition=Q(remaining_runs__isnull=False),
            ),
            # The beat's per-batch probe for singleton tasks (`services.singleton_fires`).
            models.Index(
                fields=["id"], name="idx_task_singleton", condition=Q(singleton__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return task_display_name(self.name)

    @property
    def is_schedulable(self) -> bool:
        return (
            self.enabled
            and not self.paused
            and self.deleted_at is None
            and self.schedule_type != ScheduleType.MANUAL
        )
