"""The tenant's tasks, searched and paged (the overview shows the first few and links here)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from dashboard.tenancy import dashboard_membership
from dashboard.views import _page
from scheduler_app import selectors

PAGE_SIZE = 50


@login_required
@require_safe
def tasks(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    search = request.GET.get("q", "").strip()
    tag = request.GET.get("tag", "").strip()
    found = selectors.task_list(tenant=tenant, filters={"search": search, "tag": tag})
    page = Paginator(found, PAGE_SIZE).get_page(request.GET.get("page"))
    return _page(request, "tasks", {"page": page, "search": search, "tag": tag})
