"""Machine credentials (per-tenant API keys) and the audit trail of who did what."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from scheduler_app.choices import Role
from scheduler_app.models.tenant import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class ApiKey(models.Model):
    """Shown once at creation; only its SHA-256 is stored. Revoked keys stay for the audit."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OPERATOR)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        verbose_name_plural = "API keys"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"


class AuditEntry(models.Model):
    """One change, from any interface (scheduler_app.services.audit), or a system event such as
    a quota deferral."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    actor = models.CharField(max_length=255)  # "user:alice", "apikey:ab12cd34", "system"
    action = models.CharField(
        max_length=100
    )  # "task.pause", "quota.exceeded" (old: "task-pause.post")
    object_type = models.CharField(max_length=64, blank=True, default="")
    object_id = models.CharField(max_length=64, blank=True, default="")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="idx_audit_tenant"),
            # The audit page's filters: one object's history, and one verb's entries.
            models.Index(
                fields=["tenant", "object_type", "object_id", "-id"], name="idx_audit_tenant_object"
            ),
            models.Index(fields=["tenant", "action", "-id"], name="idx_audit_tenant_action"),
        ]
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type}:{self.object_id}"


class Secret(models.Model):
    """A named value, Fernet-encrypted with SECRETS_KEY; the plaintext never rests."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=128)
    ciphertext = models.TextField()
    description = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_secret_name_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.name}"


class IdempotencyRecord(models.Model):
    """The first answer to an `Idempotency-Key`, replayed to any repeat within 24 h."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    route = models.CharField(max_length=255)
    status_code = models.PositiveSmallIntegerField()
    body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key", "route"], name="uniq_idempotency_key")
        ]

    def __str__(self) -> str:
        return self.key
