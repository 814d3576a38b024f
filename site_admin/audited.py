"""Every change made in the Django admin is in the audit log, whichever ModelAdmin made it.

The admin's own log (`log_addition`, `log_change`, `log_deletions`) is where every add, edit
and delete of every ModelAdmin passes, bulk deletes included; the site mixes
`AuditedModelAdmin` into each class registered with it (`AuditedAdminSite.register`), so a
ModelAdmin added later is audited without remembering to. Saves that go through a service
(a task, a DAG, a pause) are audited by the service, in words, with before and after; the
admin's entry for the same object is then dropped (it is deferred to the request's end,
scheduler_app.services.audit.audit_unless_recorded), so each change is written once.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin

from scheduler_app.models import Tenant
from scheduler_app.services.audit import audit_unless_recorded

# The audit log's names for the admin's models (else the model's name).
OBJECT_TYPES = {
    "taskdefinition": "task",
    "taskexecution": "execution",
    "dagrun": "dag_run",
    "notificationchannel": "channel",
    "tenantmembership": "member",
    "alertincident": "incident",
}


def object_type_of(obj: Any) -> str:
    name = obj._meta.model_name
    return OBJECT_TYPES.get(name, name)


def _tenant_of(obj: Any) -> Tenant | None:
    if isinstance(obj, Tenant):
        return obj
    tenant_id = getattr(obj, "tenant_id", None)
    return Tenant.objects.filter(id=tenant_id).first() if tenant_id else None


def _changed_fields(message: Any) -> list[str]:
    """The field names of Django's change message ([{"changed": {"fields": [...]}}])."""
    if isinstance(message, str):
        try:
            message = json.loads(message) if message else []
        except ValueError:
            return []
    names: list[str] = []
    for part in message or []:
        names += (part.get("changed") or {}).get("fields", []) if isinstance(part, dict) else []
    return names


def _audit(obj: Any, operation: str, **change: Any) -> None:
    object_type = object_type_of(obj)
    audit_unless_recorded(
        tenant=_tenant_of(obj),
        action=f"{object_type}.{operation}",
        object_type=object_type,
        object_id=str(obj.pk),
        **change,
    )


def _platform_wide(queryset: Any) -> Any:
    """A tenant-owned model's queryset, every tenant's rows (scheduler_app/tenant_scoping.py)."""
    return queryset.platform_wide() if hasattr(queryset, "platform_wide") else queryset


class AuditedModelAdmin(admin.ModelAdmin):
    # The admin is the platform's (staff only, every tenant): its lists, its object lookups
    # and the choices of its foreign keys read across tenants, and say so.
    def get_queryset(self, request):
        return _platform_wide(super().get_queryset(request))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if field is not None and hasattr(field, "queryset"):
            field.queryset = _platform_wide(field.queryset)
        return field

    def log_addition(self, request, obj, message):
        _audit(obj, "create", after={"name": str(obj)[:200]})
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        _audit(obj, "update", after={"changed": _changed_fields(message)})
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        objects = list(queryset)
        for obj in objects:
            _audit(obj, "delete", before={"name": str(obj)[:200]})
        return super().log_deletions(request, objects)


class AuditedAdminSite(admin.AdminSite):
    def register(self, model_or_iterable, admin_class=None, **options):
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, AuditedModelAdmin):
            admin_class = type(admin_class.__name__, (AuditedModelAdmin, admin_class), {})
        return super().register(model_or_iterable, admin_class, **options)
