"""Which recent windows a newest-first log search asks before the whole history.

Why: see `scheduler_app.selectors.log_search`. A window holds every matching run from its start on
(the log side is a superset, the run side exact), so when it holds the rows a page needs
(the page, and the one row after it that says more exist), no older run could come before
any of them; otherwise the next, wider window is tried, and the whole history last. The
first window tried is the narrowest the planner expects to hold them (its estimate from the
index's statistics); words it expects in few logs (or knows nothing of: rarer than any its
statistics keep) or in many read the whole history at once. One ladder serves the API's
pages (`api.log_search_pages`) and the dashboard's task history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from django.db.models import QuerySet

from scheduler_app.models import ExecutionLog, TaskExecution, Tenant
from scheduler_app.selectors.log_search import (
    FEW_MATCHES,
    SEARCH_WINDOWS,
    executions_with_log_words,
    expected_matches,
)

# Words in this share of the tenant's logs or more are common (see _middling).
COMMON_SHARE = 0.01
# A word no log holds: what the planner expects of it is what it expects of any word its
# statistics do not know (less common than the least common word they keep).
UNKNOWN_WORD = "qx7vz0unknownwordjk"


def newest_first_windows(
    *,
    tenant: Tenant,
    words: str,
    anchor: datetime | None,
    wanted: int,
    runs: QuerySet[TaskExecution] | None = None,
) -> Iterator[datetime | None]:
    """The starts of the windows to ask, in turn, for the `wanted` newest runs at or before
    `anchor` whose logs have the words; None (always last) is the whole history. `anchor`
    None (not a newest-first read): the whole history only. `runs`: the runs the search
    is narrowed to besides the words (a task's, a status'), when not all the tenant's: the
    windows are expected to hold that share of the matches."""
    if anchor is not None and _middling(tenant, words):
        share = 1.0 if runs is None else _runs_share(tenant, runs)
        widths = list(SEARCH_WINDOWS)
        # Windows the planner expects to hold too few matches are skipped (EXPLAIN only).
        while (
            len(widths) > 1
            and share * _expected_in_window(tenant, words, anchor - widths[0]) < wanted
        ):
            widths.pop(0)
        if share * _expected_in_window(tenant, words, anchor - widths[-1]) >= wanted:
            for width in widths:
                yield anchor - width
    yield None


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
    return expected < COMMON_SHARE * _plan_rows(ExecutionLog.objects.filter(tenant=tenant))


def _expected_in_window(tenant: Tenant, words: str, start: datetime) -> float:
    """The planner's estimate of the tenant's logs with the words in the window from start
    (EXPLAIN only: nothing is read but the statistics of the index's hour and words)."""
    return _plan_rows(
        executions_with_log_words(tenant=tenant, words=words, runs_since=start, estimate=True)
    )


def _runs_share(tenant: Tenant, runs: QuerySet[TaskExecution]) -> float:
    """The planner's estimate of the share of the tenant's runs that `runs` keeps."""
    everything = _plan_rows(TaskExecution.objects.filter(tenant=tenant))
    return min(1.0, _plan_rows(runs) / everything) if everything else 1.0


def _plan_rows(queryset: QuerySet) -> float:
    return json.loads(queryset.explain(format="json"))[0]["Plan"]["Plan Rows"]
