"""Who acts, for every write through the API, the dashboard and the Django admin; and the
API's fallback entry.

The middleware opens the audit scope (scheduler_app.services.audit) for each unsafe request:
the services that change state write the entry, in words, with the object and what changed.
The actor is read when the entry is written (the API authenticates inside the view). The
CLI goes through the API; its requests (User-Agent `schedctl/...`) are marked `via: cli`.

A successful API write whose services recorded nothing still leaves one entry, named by the
route (`secret-list` POST -> `secret.create`, scheduler_app.audit_verbs), so an API route
added later is never unaudited. Request bodies are not stored (they may carry secret values).
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse

from scheduler_app.audit_verbs import verb_for_route
from scheduler_app.services.audit import (
    AuditScope,
    audit_deferred_flush,
    audit_record,
    audit_scope,
)

logger = logging.getLogger(__name__)

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# Sign-ins, and accepting an invitation (its service audits it, in the tenant it joins).
SKIPPED_ROUTES = {"token-obtain", "token-refresh", "token-logout", "invitation-accept"}
INTERFACES = (("/api/", "api"), ("/dashboard/", "dashboard"), ("/admin/", "admin"))


def _interface(request: HttpRequest) -> str | None:
    for prefix, name in INTERFACES:
        if request.path.startswith(prefix):
            if name == "api" and request.headers.get("User-Agent", "").startswith("schedctl/"):
                return "cli"
            return name
    return None


def request_actor(request: HttpRequest) -> str:
    """How the audit log names who made the request: the API's access (a user, an API key),
    else the signed-in user."""
    access = getattr(request, "tenant_access", None)
    if access is not None:
        return access.actor
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.get_username()}"
    return "anonymous"


def _created(response: HttpResponse) -> str:
    """The id a create answered with (DRF's `response.data`), so its entry names the object."""
    data = getattr(response, "data", None)
    return str(data.get("id") or "") if isinstance(data, dict) else ""


class AuditMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        via = _interface(request) if request.method in UNSAFE else None
        if via is None:
            return self.get_response(request)
        with audit_scope(actor=lambda: request_actor(request), via=via) as scope:
            response = self.get_response(request)
            if response.status_code >= 400:
                return response
            try:
                audit_deferred_flush(scope)
                if via in ("api", "cli") and not scope.has_recorded():
                    self._fallback(request, response, scope)
            except Exception:  # the write already happened; never turn it into a 500
                logger.exception("could not write the audit entry for %s", request.path)
        return response

    def _fallback(self, request: HttpRequest, response: HttpResponse, scope: AuditScope) -> None:
        match = getattr(request, "resolver_match", None)
        route = match.url_name if match and match.url_name else request.path
        if route in SKIPPED_ROUTES:
            return
        access = getattr(request, "tenant_access", None)
        kwargs = dict(match.kwargs) if match else {}
        object_id = next(iter(kwargs.values()), "") if kwargs else ""
        verb = verb_for_route(route, request.method or "POST")
        audit_record(
            tenant=access.tenant if access else None,
            actor=scope.actor(),
            action=verb,
            object_type=verb.partition(".")[0],
            object_id=str(
                object_id or getattr(response, "audit_object_id", "") or _created(response)
            ),
            status_code=response.status_code,
        )
