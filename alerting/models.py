"""Tables of alerting: where a tenant's notifications go, and the incidents alerts open.

Moved here from scheduler_app without touching the database: the tables keep their names
(`Meta.db_table`), see migrations/0001_alerting_tables.py.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from scheduler_app.models import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook"  # JSON POST signed with X-Scheduler-Signature (HMAC-SHA256)
    SLACK = "slack"  # Slack-compatible incoming webhook: {"text": ...}
    EMAIL = "email"  # Django's email backend; target is a comma-separated address list
    PAGERDUTY = "pagerduty"  # PagerDuty Events API v2; the routing key is the credential


class NotificationChannel(models.Model):
    """Where a tenant's notifications go. Tasks name channels in `notifications`:
    {"on_failure": ["ops"], "on_success": [], "on_dlq": ["ops", "pager"]}; a tenant's
    alerts (error rate, missed schedules) go to every channel with `alerts=True`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="channels")
    name = models.SlugField(max_length=63)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(max_length=1000)
    # HMAC key for webhooks, Fernet-encrypted with SECRETS_KEY like tenant secrets; set and
    # read only through alerting.services.channels (write-only everywhere else).
    signing_secret_ciphertext = models.TextField(blank=True, default="")
    # What reaching the receiver takes, Fernet-encrypted like the signing secret: a Slack
    # incoming-webhook URL or bot token, a PagerDuty routing key. Write-only.
    credential_ciphertext = models.TextField(blank=True, default="")
    alerts = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        db_table = "scheduler_app_notificationchannel"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_channel_name_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.name} ({self.kind})"


class IncidentState(models.TextChoices):
    OPEN = "open"  # firing, nobody has said they are on it: re-announced every RENOTIFY_SECONDS
    ACKNOWLEDGED = "acknowledged"  # someone is on it: no more announcements, still listed
    RESOLVED = "resolved"  # the rule stopped firing, or someone resolved it by hand


class AlertIncident(models.Model):
    """One open incident per (rule, key): the row is the de-duplication. Opening inserts it
    (a second opener hits the unique index and stays silent); resolving stamps it once.
    A resolved incident is never reopened: the rule firing again opens a new one."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    rule = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    severity = models.CharField(max_length=16, default="warning")
    summary = models.TextField()
    value = models.FloatField(null=True, blank=True)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Who acknowledged it ("user:alice"); alerting/services/incidents.py writes these.
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=255, blank=True, default="")
    # Who resolved it by hand, and why; blank when the rule stopped firing.
    resolved_by = models.CharField(max_length=255, blank=True, default="")
    resolution_note = models.TextField(blank=True, default="")
    # When it was last announced (opening, or a re-announcement while nobody acknowledged).
    notified_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        db_table = "scheduler_app_alertincident"
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "key"],
                condition=Q(resolved_at__isnull=True),
                name="uniq_open_incident",
            )
        ]
        # A tenant's incidents, newest first (the pages and GET /api/v1/incidents).
        indexes = [models.Index(fields=["tenant", "-opened_at"], name="idx_incident_tenant")]

    def __str__(self) -> str:
        return f"{self.rule}: {self.summary[:80]}"

    @property
    def state(self) -> str:
        if self.resolved_at is not None:
            return IncidentState.RESOLVED
        if self.acknowledged_at is not None:
            return IncidentState.ACKNOWLEDGED
        return IncidentState.OPEN


class DatabaseWriteProbe(models.Model):
    """One row the "leader failover" alert writes and reads back in a transaction: whether
    PostgreSQL answers writes, not only reads (a primary that failed over to a read-only
    replica answers every SELECT). alerting/services/write_probe.py."""

    name = models.CharField(max_length=64, primary_key=True)
    token = models.UUIDField()
    written_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.written_at.isoformat()}"
