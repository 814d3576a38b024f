from __future__ import annotations

from django.db import models

from scheduler_app.models.tenant import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class BudgetUsage(models.Model):
    """What one tenant spent of one rolling budget (`budget`: payload bytes, mail messages)
    in one slice of its window (`scheduler_app.services.rolling_budgets`). Charged in the
    transaction that spends it, so a refused or rolled-back request counts nothing; slices
    older than the window are deleted as new ones begin."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    budget = models.CharField(max_length=32)
    bucket_start = models.DateTimeField()
    amount = models.BigIntegerField(default=0)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "budget", "bucket_start"], name="uniq_budget_usage_slice"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.budget} @ {self.bucket_start:%Y-%m-%d %H:%M}: {self.amount}"
