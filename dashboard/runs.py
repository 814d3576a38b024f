"""The Runs page: every task run or DAG run of the tenant, filtered, searched and paged by
cursor within a chosen time window. Reads go through `run_search` and `dags.selectors`; a
filter naming another tenant's task, DAG or run matches nothing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from dags import selectors as dag_selectors
from dags.choices import RunStatus
from dashboard.naming import label_dag_nodes
from dashboard.tenancy import dashboard_membership
from dashboard.views import _page
from scheduler_app import selectors
from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.paging import Page, cursor_page
from scheduler_app.selectors import run_search

PAGE_SIZE = 50
FILTERS = ("task", "dag", "status", "tag", "trigger", "worker", "q", "window", "since", "until")
WINDOW_LABELS = {
    "1h": "last hour",
    "24h": "last 24 hours",
    "7d": "last 7 days",
    "30d": "last 30 days",
    "all": "all time",
    "custom": "from / to below",
}


def _search(*, tenant: Tenant, kind: str, filters: dict[str, str], cursor: str | None) -> Page:
    if kind == "dags":
        return cursor_page(
            dag_selectors.dag_run_search(tenant=tenant, filters=filters),
            cursor=cursor,
            size=PAGE_SIZE,
        )
    roots = (
        dag_selectors.dag_node_execution_roots(tenant=tenant, reference=filters["dag"])
        if filters.get("dag")
        else None
    )
    page = cursor_page(
        run_search.execution_search(tenant=tenant, filters=filters, root_ids=roots),
        cursor=cursor,
        size=PAGE_SIZE,
    )
    label_dag_nodes(tenant=tenant, executions=page.items)
    return page


@login_required
@require_safe
def runs(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    kind = "dags" if request.GET.get("kind") == "dags" else "tasks"
    filters = {key: value for key in FILTERS if (value := request.GET.get(key, "").strip())}
    filters.setdefault("window", run_search.DEFAULT_WINDOW)
    error: ValidationFailed | None = None
    try:
        page = _search(tenant=tenant, kind=kind, filters=filters, cursor=request.GET.get("cursor"))
    except ValidationFailed as failed:
        error, page = failed, Page(items=[], total=0, next_cursor=None)
    context: dict[str, Any] = {
        "kind": kind,
        "filters": filters,
        "page": page,
        "error": error,
        "first_page": not request.GET.get("cursor"),
        "windows": WINDOW_LABELS,
        "statuses": RunStatus.values if kind == "dags" else ExecutionStatus.values,
        "triggers": Trigger.values,
        "task_names": list(selectors.task_list(tenant=tenant).values_list("name", flat=True)[:500]),
        "dag_names": list(
            dag_selectors.dag_list(tenant=tenant).values_list("name", flat=True)[:500]
        ),
    }
    response = _page(request, "runs", context)
    if error is not None:
        response.status_code = 400
    return response
