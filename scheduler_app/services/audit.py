"""The audit log's one writer."""

from __future__ import annotations

from typing import Any

from scheduler_app.models import AuditEntry, Tenant


def audit_record(
    *,
    tenant: Tenant | None,
    actor: str,
    action: str,
    object_type: str = "",
    object_id: str = "",
    status_code: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        tenant=tenant,
        actor=actor[:255],
        action=action[:100],
        object_type=object_type[:64],
        object_id=object_id[:64],
        status_code=status_code,
        detail=detail or {},
    )
