"""A page of a log search, newest first, asked of recent windows before the whole history.

Why: see `scheduler_app.selectors.log_search`; which windows, in which order: see
`scheduler_app.selectors.log_search_windows`. The page is the one the whole-history query gives: a
window that fills the page (and the one row after it that says a next page exists) holds
every run that could come before any of them. Ascending orders and `previous` links read
the whole history at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from scheduler_app.models import Tenant
from scheduler_app.selectors.log_search_windows import newest_first_windows

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
    runs: QuerySet | None = None,
) -> list | None:
    """`runs`: the runs the other filters keep (None: all the tenant's), for the estimates."""
    whole_history = search(None)  # (refuses bad filters before anything is read)
    ordering = paginator.get_ordering(request, None, view)
    cursor = paginator.decode_cursor(request)
    anchor = _anchor(ordering[0], cursor)
    # The rows this page reads (its offset, the page, the one after it), twice over.
    wanted = 2 * ((cursor.offset if cursor else 0) + paginator.get_page_size(request) + 1)
    for start in newest_first_windows(
        tenant=tenant, words=words, anchor=anchor, wanted=wanted, runs=runs
    ):
        if start is None:
            break
        page = paginator.paginate_queryset(search((ordering[0][1:], start)), request, view=view)
        if paginator.has_next:
            return page
    return paginator.paginate_queryset(whole_history, request, view=view)


def other_filters(filters: Mapping[str, str]) -> dict[str, str] | None:
    """The request's run filters besides the words (None when there are none)."""
    others = {
        name: filters[name]
        for name in ("status", "task", "tag", "since", "until", "dead_lettered")
        if filters.get(name)
    }
    return others or None


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
