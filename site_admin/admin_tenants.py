"""The Django admin of tenants and their members: the platform staff's (the admin is theirs
only), including the tenant settings no tenant may change (its network rights)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from scheduler_app.errors import DomainError
from scheduler_app.models import Tenant, TenantMembership
from scheduler_app.services.tenant_network import (
    tenant_webhook_hosts_set,
    webhook_hosts_normalize,
)


class MembershipInline(admin.TabularInline):
    model = TenantMembership
    extra = 0
    autocomplete_fields = ["user"]


class TenantAdminForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = "__all__"

    def clean_webhook_allowed_hosts(self) -> list[str]:
        try:
            return webhook_hosts_normalize(self.cleaned_data["webhook_allowed_hosts"])
        except DomainError as error:
            raise forms.ValidationError(error.message) from error


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    form = TenantAdminForm
    list_display = ["slug", "name", "is_active", "rate_limit_per_minute", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["slug", "name", "is_active"]}),
        (
            "Limits (soft quotas: over quota defers runs)",
            {
                "fields": [
                    "rate_limit_per_minute",
                    "max_concurrent_runs",
                    "max_runs_per_hour",
                    "max_compute_minutes_per_month",
                ]
            },
        ),
        (
            "Network (the platform operator's decision; tenants cannot change it)",
            {
                "fields": ["shell_egress_allowed", "webhook_allowed_hosts"],
                "description": "Internal hosts (comma separated names or IP addresses) this "
                "tenant's http tasks, notification webhooks and channel tests may reach "
                "although they resolve to private or loopback addresses.",
            },
        ),
    ]

    def save_model(self, request, obj, form, change) -> None:
        hosts = obj.webhook_allowed_hosts
        if change and "webhook_allowed_hosts" in form.changed_data:
            # The allow-list through its service (audited); the other fields as the admin saves.
            obj.webhook_allowed_hosts = form.initial.get("webhook_allowed_hosts") or []
            super().save_model(request, obj, form, change)
            tenant_webhook_hosts_set(
                tenant=obj, hosts=hosts, actor=f"operator:{request.user.get_username()}"
            )
            return
        super().save_model(request, obj, form, change)


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]
