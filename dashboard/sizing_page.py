"""The operations page of over-provisioned bulk-tier tasks: runs that use a tenth or less of
what their task asks (docs/tasks/sizing.md). A tenant's own; platform staff see every
tenant's (they need no membership for it, as on the workers page)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from dashboard.sizing import mib, seconds
from dashboard.tenancy import dashboard_membership, remember_tenant
from dashboard.views import page_context
from scheduler_app.selectors.resource_usage import OVERPROVISIONED_SHARE, overprovisioned_tasks


@login_required
@require_safe
def overprovisioned(request: HttpRequest) -> HttpResponse:
    staff = bool(request.user.is_staff)
    tenant = None if staff else dashboard_membership(request).tenant
    rows = [
        {
            "task": item["task"],
            "tenant": item["task"].tenant.slug,
            "runs": item["usage"]["runs"],
            "cpu_p95": seconds(item["usage"]["cpu_seconds"]["p95"]),
            "memory_p95": mib(item["usage"]["peak_memory_bytes"]["p95"]),
            "requested_cpu": seconds(item["usage"]["requested"].get("cpu_seconds")),
            "requested_memory": mib(item["usage"]["requested"].get("memory_bytes")),
            "shares": {key: f"{share:.1%}" for key, share in item["used_share"].items()},
            "suggested": item["usage"]["suggested_resource_requirements"],
        }
        for item in overprovisioned_tasks(tenant=tenant)
    ]
    context: dict[str, Any] = {
        "rows": rows,
        "all_tenants": staff,
        "share": f"{OVERPROVISIONED_SHARE:.0%}",
    }
    template = (
        "dashboard/sizing_live.html" if request.GET.get("fragment") else "dashboard/sizing.html"
    )
    try:
        context.update(page_context(request))
    except Http404:  # staff without a membership: the frame without a tenant
        context.update(
            tenant=None,
            memberships=[],
            poll_seconds=settings.MONITORING["DASHBOARD_POLL_SECONDS"],
            flower_url=settings.MONITORING["FLOWER_URL"],
            now=timezone.now(),
        )
        return render(request, template, context)
    return remember_tenant(request, render(request, template, context))
