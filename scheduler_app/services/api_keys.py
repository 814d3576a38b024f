"""Per-tenant API keys: the full key is returned once; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets as token_source
from datetime import timedelta

from django.utils import timezone

from scheduler_app.choices import Role
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import ApiKey, Tenant
from scheduler_app.services.audit import audit_action

KEY_PREFIX = "tsk_"
# last_used_at is written at most this often per key, so a busy key is not a hot row.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def api_key_create(*, tenant: Tenant, name: str, role: str, created_by=None) -> tuple[ApiKey, str]:
    if role not in Role.values:
        raise ValidationFailed(f"role must be one of {', '.join(Role.values)}", field="role")
    prefix = token_source.token_hex(6)
    raw_key = f"{KEY_PREFIX}{prefix}_{token_source.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        role=role,
        prefix=prefix,
        key_hash=_digest(raw_key),
        created_by=created_by,
    )
    audit_action(
        tenant=tenant,
        verb="apikey.create",
        object_type="apikey",
        object_id=key.id,
        after={"name": name, "role": role, "prefix": prefix},
    )
    return key, raw_key


def api_key_revoke(*, key: ApiKey) -> None:
    if ApiKey.objects.filter(tenant_id=key.tenant_id, id=key.id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    ):
        audit_action(
            tenant=key.tenant,
            verb="apikey.revoke",
            object_type="apikey",
            object_id=key.id,
            before={"revoked": False},
            after={"revoked": True},
        )


def api_key_authenticate(*, raw_key: str) -> ApiKey | None:
    """The live key this string is, or None. Compares digests in constant time."""
    if not raw_key.startswith(KEY_PREFIX) or raw_key.count("_") < 2:
        return None
    prefix = raw_key[len(KEY_PREFIX) :].split("_", 1)[0]
    key = (
        # Authentication comes before the tenant is known: a lookup across tenants.
        ApiKey.platform.select_related("tenant")
        .filter(prefix=prefix, revoked_at__isnull=True, tenant__is_active=True)
        .first()
    )
    if key is None or not token_source.compare_digest(key.key_hash, _digest(raw_key)):
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(tenant_id=key.tenant_id, id=key.id).update(last_used_at=now)
        key.last_used_at = now
    return key
