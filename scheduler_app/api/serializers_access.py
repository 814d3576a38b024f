"""Shapes of the access endpoints: secrets (write-only values), API keys, members, audit."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.strict import StrictSerializer
from scheduler_app.choices import Role
from scheduler_app.models import ApiKey, AuditEntry, MemberInvitation, Secret, TenantMembership


class SecretInput(StrictSerializer):
    name = serializers.CharField(max_length=128)
    value = serializers.CharField(max_length=65536, write_only=True, trim_whitespace=False)
    description = serializers.CharField(max_length=255, required=False, allow_blank=True)


class SecretUpdateInput(StrictSerializer):
    value = serializers.CharField(
        max_length=65536, write_only=True, required=False, trim_whitespace=False
    )
    description = serializers.CharField(max_length=255, required=False, allow_blank=True)


class SecretOutput(serializers.ModelSerializer):
    reference = serializers.SerializerMethodField()

    class Meta:
        model = Secret
        fields = ["id", "name", "description", "reference", "created_at", "updated_at"]

    def get_reference(self, secret: Secret) -> str:
        return "{{secret:" + secret.name + "}}"


class ApiKeyInput(StrictSerializer):
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.OPERATOR)


class ApiKeyOutput(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "name", "role", "prefix", "created_at", "last_used_at", "revoked_at"]


class ApiKeyCreatedOutput(ApiKeyOutput):
    key = serializers.CharField(help_text="The full key. Shown once; store it now.")

    class Meta(ApiKeyOutput.Meta):
        fields = [*ApiKeyOutput.Meta.fields, "key"]


class MemberInput(StrictSerializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices)
    password = serializers.CharField(
        max_length=128,
        required=False,
        write_only=True,
        help_text="Creates the user if no user has this name (never changes an existing "
        "user's password); checked by the password validators either way.",
    )


class InvitationOutput(serializers.ModelSerializer):
    """The same fields whether or not the invited user name exists."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    status = serializers.SerializerMethodField()

    class Meta:
        model = MemberInvitation
        fields = ["id", "tenant", "username", "role", "status", "created_at", "expires_at"]

    def get_status(self, invitation: MemberInvitation) -> str:
        return "invited"


class MemberRoleInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class MemberOutput(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = TenantMembership
        fields = ["id", "username", "role", "created_at"]


class AuditOutput(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "tenant",
            "actor",
            "action",
            "object_type",
            "object_id",
            "status_code",
            "detail",
            "created_at",
        ]


class UsageOutput(serializers.Serializer):
    tenant = serializers.CharField()
    usage = serializers.DictField()
    quota = serializers.DictField()
    rate_limit_per_minute = serializers.IntegerField()
    budgets = serializers.DictField(
        help_text="What the tenant may spend of what it supplies, and has spent: payload "
        "bytes and mail messages per rolling window, log searches at once and their time "
        "limit, the internal hosts the operator allowed it (webhook_allowed_hosts)"
    )
