"""A page of a log search, newest first, asked of recent windows before the whole history.

Why: see `scheduler_app.log_search`. The page is the one the whole-history query gives: a
window holds every matching run from its start on (the log side is a superset, the run side
exact), so when it fills the page (and the one row after it that says a next page exists),
no older run could come before any of them. Otherwise the next, wider window is tried, and
the whole history last. The first window tried is the narrowest the planner expects to
fill the page (its estimate from the index's statistics); words it expects in few logs (or
knows nothing of: rarer than any its statistics keep) or in many, ascending orders and
`previous` links read the whole history at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from scheduler_app.log_search import (
    FEW_MATCHES,
    SEARCH_WINDOWS,
    executions_with_log_words,
    expected_matches,
)
from scheduler_app.models import ExecutionLog, Tenant

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
    cursor = paginator.decode_cursor(request)
    anchor = _anchor(ordering[0], cursor)
    if anchor is not None and _middling(tenant, words):
        # The rows this page reads (its offset, the page, the one after it), twice over.
        wanted = 2 * ((cursor.offset if cursor else 0) + paginator.get_page_size(request) + 1)
        widths = list(SEARCH_WINDOWS)
        # Windows the planner expects to hold too few matches are skipped (EXPLAIN only).
        while len(widths) > 1 and _expected_in_window(tenant, words, anchor - widths[0]) < wanted:
            widths.pop(0)
        for width in widths:
            page = paginator.paginate_queryset(
                search((ordering[0][1:], anchor - width)), request, view=view
            )
            if paginator.has_next:
                return page
    return paginator.paginate_queryset(whole_history, request, view=view)


# Words in this share of the tenant's logs or more are common (see _middling).
COMMON_SHARE = 0.01
# A word no log holds: what the planner expects of it is what it expects of any word its
# statistics do not know (less common than the least common word they keep).
UNKNOWN_WORD = "qx7vz0unknownwordjk"


def _middling(tenant: Tenant, words: str) -> bool:
    """Whether the words are neither few nor common, as the planner expects them. Few are
    under FEW_MATCHES, or no more than a word its statistics do not know (on a large table
    that floor is thousands, while a rare word, an error code, is in a handful): the whole
    history's match bitmap is small. Common are in COMMON_SHARE of the tenant's logs or
    more: walking the runs newest first finds a page within page / share of them, which the
    planner does on the whole history (a window would have it sort the window's matches)."""
    expected = expected_matches(tenant=tenant, words=words)
    if expected < FEW_MATCHES or expected <= expected_matches(tenant=tenant, words=UNKNOWN_WORD):
        return False
    logs = json.loads(ExecutionLog.objects.filter(tenant=tenant).explain(format="json"))
    return expected < COMMON_SHARE * logs[0]["Plan"]["Plan Rows"]


def _expected_in_window(tenant: Tenant, words: str, start: datetime) -> float:
    """The planner's estimate of the tenant's logs with the words in the window from start
    (EXPLAIN only: nothing is read but the statistics of the index's hour and words)."""
    logs = executions_with_log_words(tenant=tenant, words=words, runs_since=start)
    return json.loads(logs.explain(format="json"))[0]["Plan"]["Plan Rows"]


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
