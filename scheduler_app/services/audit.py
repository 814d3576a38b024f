"""The audit log's one writer, and the scope that says who is acting.

One design for every interface: the interface (the API, the dashboard, the Django admin; the
CLI goes through the API) opens an `audit_scope` naming the actor, and the service that makes
the change writes the entry (`audit_action`), once, with the verb, the object, what changed
(before -> after) and the reason. So a write reached through any interface is audited the
same way, in the same transaction as the change (a rolled-back change leaves no entry).

Outside a scope (the runbook, the beat, the reaper) `audit_action` writes nothing: those
callers record their own entries with their own actor, as they did before, so nothing is
written twice. The API's middleware writes a fallback entry only for a request whose
service recorded nothing (api/audit.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from scheduler_app.models import AuditEntry, Tenant

REASON_MAX = 2000


@dataclass
class AuditScope:
    """Who acts for the length of one request (or command), and what was recorded."""

    actor: Callable[[], str]
    via: str  # "api" | "dashboard" | "admin" | "cli"
    recorded: list[tuple[str, str]] = field(default_factory=list)  # (object_type, object_id)
    # An interface's own record of a change, written at the end of the request unless a
    # service recorded that object meanwhile (the admin's plain saves: site_admin.audited).
    deferred: list[dict[str, Any]] = field(default_factory=list)
    # A service was asked and found nothing to change (pausing a paused task): no entry,
    # and no fallback entry either.
    unchanged: bool = False

    def has_recorded(self, object_type: str | None = None, object_id: str = "") -> bool:
        if object_type is None:
            return bool(self.recorded) or self.unchanged
        return (object_type, object_id) in self.recorded


_scope: ContextVar[AuditScope | None] = ContextVar("audit_scope", default=None)


@contextmanager
def audit_scope(*, actor: str | Callable[[], str], via: str) -> Iterator[AuditScope]:
    """Open the actor's scope; `actor` may be a callable, read when an entry is written (the
    API authenticates inside the view, after the scope opened)."""
    scope = AuditScope(actor=actor if callable(actor) else (lambda: actor), via=via)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_audit_scope() -> AuditScope | None:
    return _scope.get()


def audit_unchanged() -> None:
    """A service's word that the request changed nothing (so nothing is audited)."""
    scope = _scope.get()
    if scope is not None:
        scope.unchanged = True


def audit_unless_recorded(**entry: Any) -> None:
    """Keep `entry` (audit_record's arguments but the actor) to write when the scope closes,
    unless a service records the same object before (see `audit_deferred_flush`)."""
    scope = _scope.get()
    if scope is not None:
        scope.deferred.append(entry)


def audit_deferred_flush(scope: AuditScope) -> None:
    for entry in scope.deferred:
        if not scope.has_recorded(entry.get("object_type", ""), str(entry.get("object_id", ""))):
            audit_record(actor=scope.actor(), **entry)
    scope.deferred.clear()


def audit_record(
    *,
    tenant: Tenant | None,
    actor: str,
    action: str,
    object_type: str = "",
    object_id: str = "",
    status_code: int | None = None,
    detail: dict[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    reason: str = "",
    via: str = "",
) -> AuditEntry:
    """Write one entry. `before`/`after` (the changed fields), `reason` and `via` are kept in
    `detail` under those keys."""
    detail = dict(detail or {})
    if before is not None:
        detail["before"] = dict(before)
    if after is not None:
        detail["after"] = dict(after)
    if reason:
        detail["reason"] = reason[:REASON_MAX]
    scope = _scope.get()
    via = via or (scope.via if scope else "")
    if via:
        detail.setdefault("via", via)
    entry = AuditEntry.objects.create(
        tenant=tenant,
        actor=actor[:255],
        action=action[:100],
        object_type=object_type[:64],
        object_id=str(object_id)[:64],
        status_code=status_code,
        detail=detail,
    )
    if scope is not None:
        scope.recorded.append((entry.object_type, entry.object_id))
    return entry


def audit_action(
    *,
    tenant: Tenant | None,
    verb: str,
    object_type: str,
    object_id: Any,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    reason: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEntry | None:
    """A service's record of a change made for the actor of the current scope; nothing
    outside a scope (that caller audits itself)."""
    scope = _scope.get()
    if scope is None:
        return None
    return audit_record(
        tenant=tenant,
        actor=scope.actor(),
        action=verb,
        object_type=object_type,
        object_id=str(object_id),
        before=before,
        after=after,
        reason=reason,
        detail=detail,
    )


def changed_fields(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the fields whose value changed, each side (an edit's before -> after)."""
    keys = [key for key in after if before.get(key) != after.get(key)]
    return {key: before.get(key) for key in keys}, {key: after.get(key) for key in keys}


# Bookkeeping a definition's edit does not change by hand (never shown as "changed").
_NOT_EDITED = {
    "id",
    "tenant",
    "created_by",
    "created_at",
    "updated_at",
    "changed_at",
    "deleted_at",
    "next_fire_at",
    "last_fired_at",
    "consecutive_failures",
    "version",
}
# May hold credentials (a webhook's headers): an edit says it changed, not to what.
_OPAQUE = {"handler_config", "parameters", "health_check"}


def definition_fields(instance: Any) -> dict[str, Any]:
    """A task's or a DAG's editable fields, JSON-safe, for an edit's before and after."""
    snapshot: dict[str, Any] = {}
    for model_field in instance._meta.concrete_fields:
        if model_field.name in _NOT_EDITED:
            continue
        value = model_field.value_from_object(instance)
        if model_field.name in _OPAQUE:
            value = f"sha256:{_digest(value)}"
        snapshot[model_field.name] = json.loads(json.dumps(value, cls=DjangoJSONEncoder))
    return snapshot


def _digest(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, cls=DjangoJSONEncoder).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


@contextmanager
def audit_cascade() -> Iterator[None]:
    """The changes one action makes to other objects as its consequence (a backfill's
    cancel cancelling its queued runs): the action's own entry says it; these write none."""
    token = _scope.set(None)
    try:
        yield
    finally:
        _scope.reset(token)
