"""A page of a log search, newest first, asked of recent windows before the whole history.

Why: see `scheduler_app.log_search`. The page is the one the whole-history query gives: a
window holds every matching run from its start on (the log side is a superset, the run side
exact), so when it fills the page (and the one row after it that says a next page exists),
no older run could come before any of them. Otherwise the next, wider window is tried, and
the whole history last. Words the planner expects in few logs, ascending orders and
`previous` links read the whole history at once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from scheduler_app.log_search import FEW_MATCHES, SEARCH_WINDOWS, expected_matches
from scheduler_app.models import Tenant

# (field, start) or None for the whole history -> the executions to page through.
Search = Callable[[tuple[str, datetime] | None], QuerySet]


def log_search_page(
    paginator: CursorPagination,
    request: Request,
    *,
    view,
    search: Search,
    tenant: Tenant,
    words: str,
) -> list | None:
    whole_history = search(None)  # (refuses bad filters before anything is read)
    ordering = paginator.get_ordering(request, None, view)
    anchor = _anchor(ordering[0], paginator.decode_cursor(request))
    if anchor is not None and expected_matches(tenant=tenant, words=words) >= FEW_MATCHES:
        for width in SEARCH_WINDOWS:
            page = paginator.paginate_queryset(
                search((ordering[0][1:], anchor - width)), request, view=view
            )
            if paginator.has_next:
                return page
    return paginator.paginate_queryset(whole_history, request, view=view)


def _anchor(order: str, cursor) -> datetime | None:
    """Where the windows end: now on a first page, the cursor's position on a following one;
    None when the order is not newest first or the cursor goes backwards."""
    if not order.startswith("-") or (cursor is not None and cursor.reverse):
        return None
    if cursor is None or cursor.position is None:
        return timezone.now()
    try:
        return parse_datetime(cursor.position)
    except ValueError:
        return None
