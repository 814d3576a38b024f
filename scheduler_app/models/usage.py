from __future__ import annotations

from django.db import models

from scheduler_app.models.tenant import Tenant


class PayloadUsage(models.Model):
    """Bytes of payloads (event payloads, trigger parameters) one tenant stored in one slice
    of the quota's rolling window (`scheduler_app.services.payload_quota`). Written in the
    transaction that stores them, so a refused or rolled-back request counts nothing; slices
    older than the window are deleted as new ones begin."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    bucket_start = models.DateTimeField()
    bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "bucket_start"], name="uniq_payload_usage_bucket"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} @ {self.bucket_start:%Y-%m-%d %H:%M}: {self.bytes} B"
