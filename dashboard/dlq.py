"""The dead-letter queue's page: a filter (task, error text, dead-lettered since), a checkbox
on each row, and bulk actions: Retry selected, Delete selected (admins, as the API's DELETE),
Retry all matching. The bulk actions are the services the API's retry-all and schedctl use
(`runs.dead_letters`), and report for each item what happened to it, naming it."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_safe

from api import views as api
from dashboard.naming import label_dag_nodes
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from dashboard.views import DLQ_ROWS, _page
from runs import dead_letters
from scheduler_app import selectors
from scheduler_app.errors import DomainError

# How many items a bulk report lists one by one (the rest are counted).
REPORTED_ITEMS = 50
OUTCOME_WORDS = {
    dead_letters.RETRIED: "retried",
    dead_letters.GONE: "already handled",
    dead_letters.REFUSED: "refused",
    dead_letters.NOT_FOUND: "not found",
    dead_letters.REMOVED: "removed",
}


def _filters(query: QueryDict) -> dict[str, str]:
    """The page's filters as the selector takes them. The form's `since` is a local
    date-time without an offset: the dashboard shows UTC, so it is read as UTC."""
    found = {name: query.get(name, "").strip() for name in selectors.DEAD_LETTER_FILTERS}
    since = found["since"]
    if since:
        try:
            parsed = parse_datetime(since)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is None:
            found["since"] = f"{since}+00:00"
    return {name: value for name, value in found.items() if value}


@login_required
@require_safe
def dead_letter_page(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    filters = _filters(request.GET)
    problem = ""
    try:
        found = selectors.dead_letter_list(tenant=tenant, filters=filters)
        count = found.count()
    except DomainError as error:  # a `since` that is no date-time: say so, show nothing
        problem, found, count = error.message, selectors.dead_letter_list(tenant=tenant)[:0], 0
    return _page(
        request,
        "dlq",
        {
            "dead_letters": label_dag_nodes(tenant=tenant, executions=found[:DLQ_ROWS]),
            "dead_letter_count": count,
            "filters": {name: request.GET.get(name, "") for name in selectors.DEAD_LETTER_FILTERS},
            "filtered": bool(filters),
            "filter_problem": problem,
            "filter_query": urlencode(filters),
        },
    )


def _report(request: HttpRequest, verb: str, outcomes: list[dead_letters.BulkOutcome]) -> None:
    """One message: the counts, then each item (up to REPORTED_ITEMS) and what happened."""
    if not outcomes:
        messages.info(request, f"{verb}: nothing matched.")
        return
    counts = Counter(o.outcome for o in outcomes)
    summary = ", ".join(f"{n} {OUTCOME_WORDS[outcome]}" for outcome, n in sorted(counts.items()))
    rows = format_html_join(
        "",
        '<li data-outcome="{}">{}: {}{}</li>',
        (
            (
                o.outcome,
                f"{o.name} run {o.execution_id[:8]}" if o.name else f"run {o.execution_id[:36]}",
                o.detail,
                format_html(
                    ' → <a href="{}">new run {}</a>',
                    reverse("dashboard:execution", args=[o.new_execution_id]),
                    o.new_execution_id[:8],
                )
                if o.new_execution_id
                else "",
            )
            for o in outcomes[:REPORTED_ITEMS]
        ),
    )
    more = len(outcomes) - REPORTED_ITEMS
    tail = format_html("<li>… and {} more</li>", more) if more > 0 else ""
    level = (
        messages.success
        if counts[dead_letters.RETRIED] or counts[dead_letters.REMOVED]
        else (messages.error)
    )
    level(
        request,
        format_html(
            '{} {}: {}.<ul class="bulk-report">{}{}</ul>', verb, len(outcomes), summary, rows, tail
        ),
    )


@login_required
@follows_api(
    actions={
        "retry": ApiRule(api.DeadLetterRetryView, "POST"),
        "retry-all": ApiRule(api.DeadLetterRetryAllView, "POST"),
        # Admins only, as DELETE /api/v1/admin/dlq/<id>.
        "delete": ApiRule(api.DeadLetterDetailView, "DELETE"),
    }
)
def dead_letter_bulk(request: HttpRequest, action: str) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    actor = f"user:{request.user.get_username()}"
    back = reverse("dashboard:dlq")
    try:
        if action == "retry-all":
            filters = _filters(request.POST)
            outcomes = dead_letters.dead_letters_retry_matching(
                tenant=tenant, filters=filters, triggered_by=actor
            )
            _report(request, "Retry all matching", outcomes)
            back = f"{back}?{urlencode(filters)}" if filters else back
        else:
            ids = request.POST.getlist("ids")
            if not ids:
                messages.error(request, "Nothing was selected.")
                return redirect(back)
            if action == "retry":
                outcomes = dead_letters.dead_letters_retry_many(
                    tenant=tenant, execution_ids=ids, triggered_by=actor
                )
                _report(request, "Retry selected", outcomes)
            else:
                outcomes = dead_letters.dead_letters_delete_many(
                    tenant=tenant, execution_ids=ids, actor=actor
                )
                _report(request, "Delete selected", outcomes)
            filters = _filters(request.POST)
            back = f"{back}?{urlencode(filters)}" if filters else back
    except DomainError as error:  # too many ids, a filter that does not parse
        messages.error(request, f"Nothing was done: {error.message}")
    return redirect(back)
