"""Admin for notification channels and alert incidents (registered from scheduler_app.admin)."""

from __future__ import annotations

from django.contrib import admin

from scheduler_app.models import AlertIncident, NotificationChannel


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "kind", "target", "alerts")
    list_filter = ("kind", "alerts", "tenant")
    search_fields = ("name", "target")


@admin.register(AlertIncident)
class AlertIncidentAdmin(admin.ModelAdmin):
    list_display = ("rule", "key", "tenant", "severity", "opened_at", "resolved_at")
    list_filter = ("rule", "severity", "resolved_at")
    search_fields = ("key", "summary")
    readonly_fields = [f.name for f in AlertIncident._meta.fields]
