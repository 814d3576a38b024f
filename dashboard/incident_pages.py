"""Alert incidents where operators look: the Incidents page (open, acknowledged, recently
resolved; the nav's badge counts the open ones), and the block the overview, a task's page and
a DAG's page show of theirs. Each row says its rule in words, what it concerns (linked, by
name), since when, its runbook, and offers Acknowledge / Resolve to whom the API's rules
allow (operators and admins: api/views_incidents.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from alerting import selectors as alerting_selectors
from alerting.incident_words import rule_title
from alerting.models import IncidentState
from alerting.services import incidents as incident_services
from api import views_incidents as api
from dashboard.incidents import incident_rows
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from dashboard.views import _page
from scheduler_app.errors import DomainError, NotFound

RESOLVED_ROWS = 50


@login_required
@follows_api(GET=ApiRule(api.IncidentListView, "GET"), HEAD=ApiRule(api.IncidentListView, "GET"))
def incident_list(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    active = alerting_selectors.incident_list(tenant=tenant).filter(resolved_at__isnull=True)
    resolved = alerting_selectors.incident_list(tenant=tenant, state=IncidentState.RESOLVED)
    return _page(
        request,
        "incidents",
        {
            "active": incident_rows(tenant=tenant, incidents=active[:200]),
            "resolved": incident_rows(tenant=tenant, incidents=resolved[:RESOLVED_ROWS]),
            "resolved_rows": RESOLVED_ROWS,
        },
    )


def _back(request: HttpRequest) -> HttpResponse:
    """To the page the button was on (the overview, a task, a DAG), else the Incidents page."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(wanted)
    return redirect("dashboard:incidents")


@login_required
@follows_api(
    actions={
        "acknowledge": ApiRule(api.IncidentAcknowledgeView, "POST"),
        "resolve": ApiRule(api.IncidentResolveView, "POST"),
    }
)
def incident_action(request: HttpRequest, incident_id: str, action: str) -> HttpResponse:
    membership = dashboard_membership(request)
    try:
        incident = alerting_selectors.incident_get(
            tenant=membership.tenant, incident_id=incident_id
        )
    except NotFound as error:
        raise Http404(str(error)) from error
    actor = f"user:{request.user.get_username()}"
    title = rule_title(incident.rule)
    try:
        if action == "acknowledge":
            incident_services.incident_acknowledge(incident=incident, actor=actor)
            messages.success(request, f"Acknowledged: {title}. It is no longer announced.")
        else:
            incident_services.incident_resolve_by_hand(
                incident=incident, actor=actor, note=request.POST.get("note", "")
            )
            messages.success(request, f"Resolved: {title}")
    except DomainError as error:
        messages.error(request, f"{title}: {error.message}")
    return _back(request)
