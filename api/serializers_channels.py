"""Shapes of /api/v1/channels: what each kind takes, and what is shown (never a secret)."""

from __future__ import annotations

from rest_framework import serializers

from alerting.models import ChannelKind, NotificationChannel
from alerting.services.targets import SLACK_CONNECTION_NAME
from api.strict import StrictSerializer


def _write_only(help_text: str) -> serializers.CharField:
    return serializers.CharField(
        required=False, write_only=True, trim_whitespace=False, max_length=2048, help_text=help_text
    )


class ChannelFieldsInput(StrictSerializer):
    """The fields of a kind (webhook: url, signing_secret; slack: webhook_url or bot_token;
    email: addresses; pagerduty: routing_key) and `alerts`."""

    url = serializers.CharField(required=False, max_length=1000, help_text="webhook: the URL")
    signing_secret = _write_only("webhook: HMAC-SHA256 key of X-Scheduler-Signature")
    webhook_url = _write_only("slack: an incoming-webhook URL (kept encrypted)")
    bot_token = _write_only("slack: a bot token, xoxb-... (kept encrypted)")
    addresses = serializers.ListField(
        child=serializers.CharField(max_length=254), required=False, help_text="email"
    )
    routing_key = _write_only("pagerduty: the integration's routing key (kept encrypted)")
    alerts = serializers.BooleanField(
        required=False, help_text="Also receives the tenant's alerts (error rate, missed runs)"
    )


class ChannelInput(ChannelFieldsInput):
    name = serializers.SlugField(max_length=63)
    kind = serializers.ChoiceField(choices=ChannelKind.choices)


class ChannelTestInput(StrictSerializer):
    slack_channel = serializers.CharField(
        required=False, max_length=80, help_text="slack bot token: the Slack channel to post to"
    )


class ChannelOutput(serializers.ModelSerializer):
    uri = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    addresses = serializers.SerializerMethodField()
    has_signing_secret = serializers.SerializerMethodField()
    has_credential = serializers.SerializerMethodField()

    class Meta:
        model = NotificationChannel
        fields = [
            "id",
            "name",
            "kind",
            "uri",
            "url",
            "addresses",
            "has_signing_secret",
            "has_credential",
            "alerts",
            "created_at",
        ]

    def get_uri(self, channel: NotificationChannel) -> str:
        """How a task names it in `notifications`."""
        if channel.kind == ChannelKind.SLACK:
            if channel.name == SLACK_CONNECTION_NAME:
                return "slack://<slack-channel>"
            return f"slack://{channel.name}"
        if channel.kind in (ChannelKind.WEBHOOK, ChannelKind.PAGERDUTY):
            return f"{channel.kind}://{channel.name}"
        return channel.name

    def get_url(self, channel: NotificationChannel) -> str | None:
        return channel.target if channel.kind == ChannelKind.WEBHOOK else None

    def get_addresses(self, channel: NotificationChannel) -> list[str] | None:
        if channel.kind != ChannelKind.EMAIL:
            return None
        return [a.strip() for a in channel.target.split(",") if a.strip()]

    def get_has_signing_secret(self, channel: NotificationChannel) -> bool:
        return bool(channel.signing_secret_ciphertext)

    def get_has_credential(self, channel: NotificationChannel) -> bool:
        return bool(channel.credential_ciphertext) or (
            channel.kind == ChannelKind.SLACK and bool(channel.target)
        )


class ChannelTestOutput(serializers.Serializer):
    ok = serializers.BooleanField()
    detail = serializers.CharField(help_text="What the receiver answered (or why it failed)")
