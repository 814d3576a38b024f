"""The Runs page: every task run or DAG run of the tenant, filtered, searched and paged by
cursor within a chosen time window. Reads go through `run_search` and `dags.selectors`; a
filter naming another tenant's task, DAG or run matches nothing.

The search box searches the runs (task name, error, id) or, with `search_in=logs`, the
tenant's stored logs: the runs whose log has the words come first, with the lines that
matched, under the log search's budget (a time limit, searches per tenant at once:
`scheduler_app.selectors.log_search_budget`), the API's rules for who may search."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from dags import selectors as dag_selectors
from dags.choices import RunStatus
from dags.outcome_selectors import dag_run_outcomes
from dashboard.log_hits import highlighted
from dashboard.naming import label_dag_nodes
from dashboard.tenancy import dashboard_membership
from dashboard.views import _page
from scheduler_app import selectors
from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.errors import DomainError, ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.paging import Page, cursor_page
from scheduler_app.selectors import run_log_search, run_search
from scheduler_app.selectors.log_search_budget import log_search_budget

PAGE_SIZE = 50
FILTERS = ("task", "dag", "status", "tag", "trigger", "worker", "q", "window", "since", "until")
SEARCH_IN = {"runs": "task, error or run id", "logs": "the runs' logs"}
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
        page = cursor_page(
            dag_selectors.dag_run_search(tenant=tenant, filters=filters),
            cursor=cursor,
            size=PAGE_SIZE,
        )
        outcomes = dag_run_outcomes(tenant=tenant, runs=page.items)
        for run in page.items:
            run.outcome = outcomes.get(run.id)
        return page
    roots = _roots(tenant, filters)
    page = cursor_page(
        run_search.execution_search(tenant=tenant, filters=filters, root_ids=roots),
        cursor=cursor,
        size=PAGE_SIZE,
    )
    label_dag_nodes(tenant=tenant, executions=page.items)
    return page


def _roots(tenant: Tenant, filters: dict[str, str]):
    if not filters.get("dag"):
        return None
    return dag_selectors.dag_node_execution_roots(tenant=tenant, reference=filters["dag"])


def _log_search(*, tenant: Tenant, filters: dict[str, str], cursor: str | None) -> Page:
    """The runs whose stored log has the words of `q`, each with its matching lines
    (`log_hits`), under the tenant's log search budget. Page.total is what the page holds:
    a log search never counts every match (see `run_log_search`)."""
    words = filters.get("q", "")
    with log_search_budget(tenant_id=tenant.id):
        found = run_log_search.log_search_page(
            tenant=tenant,
            filters=filters,
            words=words,
            cursor=cursor,
            size=PAGE_SIZE,
            root_ids=_roots(tenant, filters),
        )
        lines = run_log_search.log_hit_lines(
            tenant=tenant, execution_ids=[e.id for e in found.items], words=words
        )
    terms = run_log_search.search_terms(words)
    for execution in found.items:
        execution.log_hits = [highlighted(line, terms) for line in lines.get(execution.id, [])]
    label_dag_nodes(tenant=tenant, executions=found.items)
    return Page(items=found.items, total=len(found.items), next_cursor=found.next_cursor)


@login_required
@require_safe
def runs(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    kind = "dags" if request.GET.get("kind") == "dags" else "tasks"
    filters = {key: value for key in FILTERS if (value := request.GET.get(key, "").strip())}
    filters.setdefault("window", run_search.DEFAULT_WINDOW)
    search_in = "logs" if kind == "tasks" and request.GET.get("search_in") == "logs" else "runs"
    cursor = request.GET.get("cursor")
    error: DomainError | None = None
    try:
        if search_in == "logs":
            if not filters.get("q"):
                raise ValidationFailed("type the words to look for in the logs", field="q")
            page = _log_search(tenant=tenant, filters=filters, cursor=cursor)
        else:
            page = _search(tenant=tenant, kind=kind, filters=filters, cursor=cursor)
    except DomainError as failed:  # bad input, or a log search over its budget
        error, page = failed, Page(items=[], total=0, next_cursor=None)
    context: dict[str, Any] = {
        "kind": kind,
        "search_in": search_in,
        "search_in_choices": SEARCH_IN,
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
        response.status_code = error.status_code
        if error.retry_after:
            response["Retry-After"] = str(int(error.retry_after + 0.999))
    return response
