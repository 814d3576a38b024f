"""The dashboard's backfills: every backfill of the tenant with its progress (a live page),
and a cancel button for operators. Reads go through `dags.backfill_selectors`; the cancel
through `dags.services.backfills`, as the API's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_safe

from api.dags.backfill_views import BackfillCancelView
from dags import backfill_selectors
from dags.choices import BackfillStatus
from dags.services import backfills
from dashboard.actions import posted_note, tenant_object
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from dashboard.views import _page
from scheduler_app.errors import DomainError


@login_required
@require_safe
def backfill_list(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    rows = []
    for backfill in backfill_selectors.backfill_list(tenant=tenant)[:100]:
        outcomes = backfill_selectors.backfill_outcomes(backfill=backfill)
        done = outcomes["succeeded"] + outcomes["failed"] + outcomes["cancelled"]
        done += backfill.already_recorded
        rows.append(
            {
                "backfill": backfill,
                "target": backfill.task if backfill.task_id else backfill.dag,
                "outcomes": outcomes,
                "percent": round(100 * done / backfill.total) if backfill.total else 100,
                "cancellable": backfill.status == BackfillStatus.RUNNING,
            }
        )
    return _page(request, "backfills", {"rows": rows})


@login_required
@follows_api(POST=ApiRule(BackfillCancelView, "POST"))
def backfill_cancel(request: HttpRequest, backfill_id: str) -> HttpResponse:
    backfill = tenant_object(request, backfill_selectors.backfill_get, backfill_id=backfill_id)
    try:
        backfills.backfill_cancel(backfill=backfill, note=posted_note(request))
        messages.success(request, "Backfill cancelled: nothing more is released")
    except DomainError as error:
        messages.error(request, str(error))
    return redirect("dashboard:backfills")
