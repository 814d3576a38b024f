"""/metrics (behind a bearer token or basic auth), /readyz and /readyz/scheduler (up or down
for anyone, their detail behind the same credentials)."""

from __future__ import annotations

import base64
import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler_app.monitoring.metrics import SchedulerCollector
from scheduler_app.monitoring.system import readiness, scheduler_health
from scheduler_app.monitoring.workers import shell_sandbox_by_worker


def _authorized(request: HttpRequest) -> bool:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    token = settings.MONITORING["METRICS_BEARER_TOKEN"]
    basic = settings.MONITORING["METRICS_BASIC_AUTH"]
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[7:].encode(), token.encode())
    if basic and header.startswith("Basic "):
        try:
            given = base64.b64decode(header[6:], validate=True)
        except ValueError:
            return False
        return hmac.compare_digest(given, basic.encode())
    # A signed-in staff member may look at it in a browser.
    return bool(getattr(request, "user", None) and request.user.is_staff)


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _authorized(request):
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Basic realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _checks_response(request: HttpRequest, checks: dict[str, str]) -> JsonResponse:
    """Up or down for anyone (what a load balancer or a probe needs: the status code); the
    detail (each check's error, the workers' host names and sandbox paths) only for the
    metrics credentials or a staff session: it maps the platform for an attacker."""
    failing = [name for name, state in checks.items() if state != "ok"]
    body: dict[str, object] = {"status": "ok" if not failing else "unavailable"}
    if _authorized(request):
        body["checks"] = checks
        # Informational, not a readiness condition of this process: which workers run
        # shell tasks sandboxed, unsandboxed, or cannot run them at all.
        body["shell_sandbox"] = shell_sandbox_by_worker()
    return JsonResponse(body, status=200 if not failing else 503)


def readyz_view(request: HttpRequest) -> JsonResponse:
    """This process's own dependencies (database, Redis): what a load balancer asks."""
    return _checks_response(request, readiness())


def scheduler_readyz_view(request: HttpRequest) -> JsonResponse:
    """The scheduler's health (a leading beat), for monitoring; alert SchedulerNoLeader
    watches the same from Prometheus."""
    return _checks_response(request, scheduler_health())
