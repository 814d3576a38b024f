"""Admin for notification channels and alert incidents (registered from site_admin.admin).

A channel's signing secret is write-only here: the form takes a new one (or clears it) and
never shows the stored value, encrypted or not."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from alerting.incident_words import rule_title
from alerting.models import AlertIncident, NotificationChannel
from alerting.services.channels import signing_secret_encrypt


class NotificationChannelForm(forms.ModelForm):
    signing_secret = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Webhook HMAC key. Write-only: leave blank to keep the current one.",
    )
    clear_signing_secret = forms.BooleanField(required=False, label="Remove the signing secret")
    credential = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Slack incoming-webhook URL or bot token, PagerDuty routing key. Write-only: "
        "leave blank to keep the current one.",
    )

    class Meta:
        model = NotificationChannel
        fields = ("tenant", "name", "kind", "target", "alerts")

    def save(self, commit: bool = True) -> NotificationChannel:
        channel = super().save(commit=False)
        if self.cleaned_data.get("clear_signing_secret"):
            channel.signing_secret_ciphertext = ""
        elif self.cleaned_data.get("signing_secret"):
            channel.signing_secret_ciphertext = signing_secret_encrypt(
                self.cleaned_data["signing_secret"]
            )
        if self.cleaned_data.get("credential"):
            channel.credential_ciphertext = signing_secret_encrypt(self.cleaned_data["credential"])
        if commit:
            channel.save()
        return channel


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = NotificationChannelForm
    list_display = ("name", "tenant", "kind", "target", "alerts", "signed")
    list_filter = ("kind", "alerts", "tenant")
    search_fields = ("name", "target")

    @admin.display(boolean=True, description="signed")
    def signed(self, channel: NotificationChannel) -> bool:
        return bool(channel.signing_secret_ciphertext)


@admin.register(AlertIncident)
class AlertIncidentAdmin(admin.ModelAdmin):
    """Read-only: incidents are acknowledged and resolved on the dashboard's Incidents page and
    through the API (audited there); the admin lists every tenant's, the platform's too."""

    list_display = ("title", "summary", "tenant", "severity", "state", "opened_at", "resolved_at")
    list_filter = ("rule", "severity", "resolved_at")
    search_fields = ("key", "summary")
    readonly_fields = [f.name for f in AlertIncident._meta.fields]

    @admin.display(description="alert", ordering="rule")
    def title(self, incident: AlertIncident) -> str:
        return rule_title(incident.rule)

    @admin.display(description="state")
    def state(self, incident: AlertIncident) -> str:
        return incident.state

    def has_add_permission(self, request) -> bool:
        return False
