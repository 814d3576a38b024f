from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from scheduler_app.choices import Role


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=255)
    is_active = models.BooleanField(default=True)
    # Days of execution history (and logs) kept online; older runs are archived, then dropped.
    retention_days = models.PositiveIntegerField(default=90)
    created_at = models.DateTimeField(auto_now_add=True)
    # Limits (soft: a run over quota is deferred, never failed). Defaults from the design.
    rate_limit_per_minute = models.PositiveIntegerField(default=1000)
    max_concurrent_runs = models.PositiveIntegerField(default=100)
    max_runs_per_hour = models.PositiveIntegerField(default=10_000)
    max_compute_minutes_per_month = models.PositiveIntegerField(default=50_000)
    # Stored execution logs (scheduler_app.services.log_quota): over it, logs are cut.
    max_log_bytes = models.BigIntegerField(default=100 * 1024**3)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class TenantMembership(models.Model):
    """A user's role inside one tenant; a user may belong to several tenants."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="uniq_membership_user_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"
