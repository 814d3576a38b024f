"""Sleep and sensor nodes' rows (`DagTimer`).

Kept out of `dags/models.py` (one concern a module, and that module under 500 lines); that
module imports this one so Django finds it in the `dags` app. The run is referenced by the
app label ("dags.DagRun"), so this module does not import `dags.models` back.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from dags.choices import TimerKind, TimerStatus
from scheduler_app.models import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class DagTimer(models.Model):
    """A sleep or sensor node of a run: a row, not a timer, so a restart of every process
    changes nothing. The leader's housekeeping takes the due rows (`due_at`, SKIP LOCKED) and
    ends the node or pokes again later (`dags.services.timers`)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("dags.DagRun", on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=8, choices=TimerKind.choices)
    status = models.CharField(max_length=12, choices=TimerStatus.choices)
    started_at = models.DateTimeField()
    # The wake-up of a sleep; the next poke of a sensor.
    due_at = models.DateTimeField()
    # A sensor's timeout; a sleep has none.
    deadline = models.DateTimeField(null=True, blank=True)
    interval_seconds = models.FloatField(default=0.0)  # a sensor's current (backed-off) wait
    attempts = models.PositiveIntegerField(default=0)  # pokes made
    last_poked_at = models.DateTimeField(null=True, blank=True)
    last_result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Taken by a housekeeping round until then (a round that died leaves it to the next).
    lease_until = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "DAG timer"
        verbose_name_plural = "DAG timers"
        ordering = ["run", "node_id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "node_id"], name="uniq_dag_timer_node"),
        ]
        indexes = [
            models.Index(
                fields=["due_at"], name="idx_dag_timer_due", condition=Q(status="waiting")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id} {self.kind} until {self.due_at}"
