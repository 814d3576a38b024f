from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from scheduler_app.choices import Role
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


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
    # Shell tasks of this tenant may ask for `"network": "egress"` (outbound internet through
    # a user-mode network; see docs/tasks/shell-sandbox.md). Off by default: the platform
    # operator decides.
    shell_egress_allowed = models.BooleanField(default=False)
    # Internal hosts (names or IP literals that resolve to private, loopback or link-local
    # addresses) this tenant's http tasks, notification webhooks and channel tests may reach
    # past the SSRF guard. Set by the platform operator only (the admin, `manage.py
    # tenant_webhook_hosts`), never through the tenant's API or dashboard; the platform's own
    # alerts have their own list (NOTIFY_WEBHOOK_ALLOWED_HOSTS), which no tenant gets.
    webhook_allowed_hosts = ArrayField(models.CharField(max_length=253), default=list, blank=True)
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

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="uniq_membership_user_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class MemberInvitation(models.Model):
    """A tenant admin's offer of a role, delivered as a single-use token (by email, or as a
    link the admin hands over). It names no account: whoever holds the token chooses their
    own credentials when accepting (a new account), or accepts signed in with their own.
    Only the SHA-256 of the token is stored; the token is shown once, at creation.

    The review's takeover: addressed by user name, an invitation bound itself to whatever
    account had that name, and another tenant's admin had created it with his password."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    # Where the token was sent (blank: the admin took the link). Not an identity: the
    # account that accepts may have any address.
    email = models.EmailField(blank=True, default="")
    # The token is `inv_<token_prefix>_<secret>`; the prefix finds the row, the hash of the
    # whole token is compared in constant time.
    token_prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    invited_by = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="idx_invitation_tenant")]

    def __str__(self) -> str:
        return f"invitation to {self.tenant} as {self.role} ({self.token_prefix})"

    def status_at(self, now) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= now else "pending"
