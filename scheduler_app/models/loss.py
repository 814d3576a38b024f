from __future__ import annotations

from django.db import models

from scheduler_app.models.tenant import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class LossOutcome(models.TextChoices):
    # The run went back to the queue as the same attempt (WORKER_LOST_REQUEUES not spent).
    REQUEUED = "requeued", "re-queued"
    # The requeues were spent: the attempt failed as `worker_lost` (a retry, or the DLQ).
    FAILED = "failed", "failed"


class ExecutionLoss(models.Model):
    """One time a run lost its worker while it ran (heartbeats missed, or its lease expired).

    The run's history of losses: the execution row keeps one timestamp per state, so a run
    re-queued twice and then finished would otherwise show nothing of it. The losses of an
    attempt also count its requeues (`WORKER_LOST_REQUEUES`): counted under the execution's
    row lock, so two reapers of one loss write one row. A table of its own, not a column of
    the partitioned executions table (ARCHITECTURE §8: no foreign key points at it, so
    `execution_id` is a plain UUID); rows go with their tenant. A tenant's data: read through
    `scheduler_app.selectors.losses`, which takes the tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    execution_id = models.UUIDField()
    attempt = models.PositiveSmallIntegerField()
    worker_id = models.CharField(max_length=255, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    outcome = models.CharField(max_length=16, choices=LossOutcome.choices)
    lost_at = models.DateTimeField()

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "execution loss"
        verbose_name_plural = "execution losses"
        indexes = [models.Index(fields=["execution_id", "lost_at"], name="idx_loss_execution")]

    def __str__(self) -> str:
        return f"{self.execution_id} lost on {self.worker_id or 'a worker'} ({self.outcome})"
