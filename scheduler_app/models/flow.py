"""Flow control's own tables: a tenant's named pools, and the starts a rate limit counts.

The running side of every limit (concurrency keys, pools) is not a table: it is the running
executions themselves, each carrying what it holds (`TaskExecution.flow_holds`), counted on
a partial index at the claim. A slot is then freed by whatever ends the run (its finish, a
cancel, the reaper when its lease ends), with no second record to keep in step.
"""

from __future__ import annotations

import uuid

from django.db import models

from scheduler_app.models.tenant import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class Pool(models.Model):
    """A tenant's named pool of slots (Airflow's pools): tasks and DAG nodes that name it
    take `pool_slots` of its `slots` while they run. Its size is read at every claim, so a
    resize takes effect at once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    slots = models.PositiveIntegerField()
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_pool_name_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.slots} slots)"


class FlowRateStart(models.Model):
    """One start counted by a rate limit: the key's starts within the last window are its
    usage (a sliding window, so no 60 s span ever holds more than the limit). Rows older than
    the longest window (an hour) are deleted by a housekeeping chore."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=300)
    started_at = models.DateTimeField()
    execution_id = models.UUIDField()

    class Meta:
        indexes = [models.Index(fields=["key", "started_at"], name="idx_flow_rate_key_time")]

    def __str__(self) -> str:
        return f"{self.key} at {self.started_at:%H:%M:%S}"
