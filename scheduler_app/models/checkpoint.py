from __future__ import annotations

from django.db import models

from scheduler_app.models.tenant import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class RunCheckpoint(models.Model):
    """The last checkpoint of one run, whichever of its attempts saved it.

    Keyed by the run's chain (its first attempt's id, `TaskExecution.root_execution_id`), so a
    later attempt (a retry after a lost worker or a timeout) and the same attempt claimed again
    (handed back by a draining worker) find it. A table of its own rather than a column on
    the partitioned executions table: a checkpoint is rewritten many times while a run goes,
    and each rewrite of a wide, heavily indexed execution row would cost far more; few runs
    checkpoint at all. No foreign key to the executions (they are partitioned, ARCHITECTURE
    §8); rows go with their tenant, and retention deletes old ones (`checkpoints_expire`).

    `state` holds what a python handler gave `context.checkpoint` (JSON, masked);
    `file_data` what a shell task left in its checkpoint file. Both are a tenant's data: read
    only through `scheduler_app.selectors.checkpoints`, which takes the tenant."""

    chain_id = models.UUIDField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    execution_id = models.UUIDField(help_text="the attempt that saved it last")
    attempt = models.PositiveSmallIntegerField()
    state = models.JSONField(null=True, blank=True)
    file_data = models.BinaryField(null=True, blank=True)
    size_bytes = models.PositiveIntegerField(default=0)
    saves = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField()

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        indexes = [models.Index(fields=["updated_at"], name="idx_checkpoint_updated")]

    def __str__(self) -> str:
        return f"checkpoint of {self.chain_id} ({self.size_bytes} bytes)"
