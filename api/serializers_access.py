"""Shapes of the access endpoints: secrets (write-only values), API keys, members, audit."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from api.strict import StrictSerializer
from scheduler_app.audit_verbs import verb_of, verb_words
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


class InvitationInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)
    email = serializers.EmailField(
        required=False,
        allow_blank=True,
        help_text="Mail the invitation link there (then the answer does not carry the token). "
        "Without it, the answer carries the link, once, for you to hand over.",
    )

    def to_internal_value(self, data):
        # The old request named an account: say why that is gone, not only "unknown field".
        if isinstance(data, dict) and ({"username", "password"} & set(data)):
            raise serializers.ValidationError(
                {
                    key: [
                        "a tenant admin does not name or create accounts: the invitee chooses "
                        "their own user name and password when accepting"
                    ]
                    for key in sorted({"username", "password"} & set(data))
                }
            )
        return super().to_internal_value(data)


class InvitationOutput(serializers.ModelSerializer):
    """Never the token: only its hash is stored."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    status = serializers.SerializerMethodField()
    accepted_by = serializers.SerializerMethodField()

    class Meta:
        model = MemberInvitation
        fields = [
            "id",
            "tenant",
            "role",
            "email",
            "status",
            "invited_by",
            "created_at",
            "expires_at",
            "accepted_at",
            "accepted_by",
            "revoked_at",
        ]

    def get_status(self, invitation: MemberInvitation) -> str:
        return invitation.status_at(timezone.now())

    def get_accepted_by(self, invitation: MemberInvitation) -> str | None:
        user = invitation.accepted_by
        return user.get_username() if user is not None else None


class InvitationCreatedOutput(InvitationOutput):
    delivery = serializers.ChoiceField(
        choices=["email", "link"], help_text="`email`: sent to `email`; `link`: hand it over."
    )
    token = serializers.CharField(
        allow_null=True, help_text="Shown once, and only when not emailed; store nothing else."
    )
    accept_url = serializers.CharField(
        allow_null=True, help_text="The page that takes the token (only when not emailed)."
    )

    class Meta(InvitationOutput.Meta):
        fields = [*InvitationOutput.Meta.fields, "delivery", "token", "accept_url"]


class InvitationAcceptInput(StrictSerializer):
    token = serializers.CharField(max_length=200, trim_whitespace=True)
    username = serializers.CharField(
        max_length=150,
        required=False,
        help_text="Signed out: the new account's user name (your choice). Signed in: leave "
        "it out, you accept with your own account.",
    )
    password = serializers.CharField(
        max_length=128,
        required=False,
        write_only=True,
        trim_whitespace=False,
        style={"input_type": "password"},
        help_text="Signed out: the new account's password (the password validators apply).",
    )


class InvitationAcceptedOutput(serializers.Serializer):
    tenant = serializers.CharField()
    username = serializers.CharField()
    role = serializers.CharField()
    member_id = serializers.IntegerField()
    new_account = serializers.BooleanField()


class MemberRoleInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class MemberOutput(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = TenantMembership
        fields = ["id", "username", "role", "created_at"]


class AuditOutput(serializers.ModelSerializer):
    """`verb` is the action as a verb (old entries' route spelling, `task-pause.post`, read as
    `task.pause`), `words` the same in words ("paused task"); `before`, `after` and `reason`
    are in `detail` too."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    verb = serializers.SerializerMethodField()
    words = serializers.SerializerMethodField()
    before = serializers.SerializerMethodField()
    after = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()
    via = serializers.SerializerMethodField()

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "tenant",
            "actor",
            "action",
            "verb",
            "words",
            "object_type",
            "object_id",
            "before",
            "after",
            "reason",
            "via",
            "status_code",
            "detail",
            "created_at",
        ]

    def get_verb(self, entry: AuditEntry) -> str:
        return verb_of(entry.action)

    def get_words(self, entry: AuditEntry) -> str:
        return verb_words(verb_of(entry.action), entry.object_type)

    def get_before(self, entry: AuditEntry) -> dict | None:
        return (entry.detail or {}).get("before")

    def get_after(self, entry: AuditEntry) -> dict | None:
        return (entry.detail or {}).get("after")

    def get_reason(self, entry: AuditEntry) -> str:
        detail = entry.detail or {}
        return detail.get("reason") or detail.get("note") or detail.get("comment") or ""

    def get_via(self, entry: AuditEntry) -> str:
        return (entry.detail or {}).get("via", "")


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
