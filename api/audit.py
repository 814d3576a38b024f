"""Every successful write through the API lands in the audit log, for every route.

A middleware rather than per-view calls, so views added later are audited without
remembering to: it names the route, the object (the route's id argument), the actor
and the tenant the request acted for. Request bodies are not stored (they may carry
secret values).
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse

from scheduler_app.services.audit import audit_record

logger = logging.getLogger(__name__)

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# Sign-ins, accepting an invitation (its service audits it, in the tenant it joins), and an
# incident's acknowledgement or resolution (its service audits it in words, for the
# dashboard's buttons too).
SKIPPED_ROUTES = {
    "token-obtain",
    "token-refresh",
    "token-logout",
    "invitation-accept",
    "incident-acknowledge",
    "incident-resolve",
}


class AuditMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.method in UNSAFE
            and request.path.startswith("/api/")
            and response.status_code < 400
        ):
            try:
                self._record(request, response)
            except Exception:  # the write already happened; never turn it into a 500
                logger.exception("could not write the audit entry for %s", request.path)
        return response

    def _record(self, request: HttpRequest, response: HttpResponse) -> None:
        match = getattr(request, "resolver_match", None)
        route = match.url_name if match and match.url_name else request.path
        if route in SKIPPED_ROUTES:
            return
        access = getattr(request, "tenant_access", None)
        user = getattr(request, "user", None)
        actor = access.actor if access else f"user:{user.get_username()}" if user else "anonymous"
        kwargs = dict(match.kwargs) if match else {}
        object_id = next(iter(kwargs.values()), "") if kwargs else ""
        audit_record(
            tenant=access.tenant if access else None,
            actor=actor,
            action=f"{route}.{request.method.lower()}",
            object_type=route.split("-")[0],
            object_id=str(object_id or getattr(response, "audit_object_id", "") or ""),
            status_code=response.status_code,
        )
