"""The Runs page's "search logs" mode: the tenant's runs whose stored log has the words,
newest first by keyset, with the lines that matched.

Costs are the log search's own (`scheduler_app.selectors.log_search`): the caller holds
`log_search_budget` (a time budget over every statement, a number of searches per tenant at
once) around `log_search_page` and `log_hit_lines`; the page asks recent windows before the
whole history (`log_search_windows`), and it reads PAGE rows plus one, never a count of every
match (a count is the whole history's matches, what the windows exist to avoid). The matching
lines are read from each log's searchable part only (SEARCHABLE_CHARS: what the words index
covers), at most HIT_LINES a run.

Tenant wall: the runs start at the tenant (`run_search.execution_search`), the logs' words are
looked up among the tenant's logs only, and the lines are read from the tenant's logs of the
runs on the page.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.db.models import Q, QuerySet
from django.db.models.functions import Substr
from django.utils import timezone

from scheduler_app.models import ExecutionLog, TaskExecution, Tenant
from scheduler_app.paging import cursor_decode, cursor_encode
from scheduler_app.selectors import run_search
from scheduler_app.selectors.log_search import SEARCHABLE_CHARS, executions_with_log_words
from scheduler_app.selectors.log_search_windows import newest_first_windows

HIT_LINES = 3
HIT_LINE_CHARS = 300


@dataclass(frozen=True)
class LogHitsPage:
    items: list[TaskExecution]
    next_cursor: str | None  # None on the last page


def log_search_page(
    *,
    tenant: Tenant,
    filters: Mapping[str, str],
    words: str,
    cursor: str | None,
    size: int,
    root_ids: QuerySet | None = None,
) -> LogHitsPage:
    """`size` runs after `cursor` (newest first) matching the Runs page's other filters whose
    logs have `words`. Raises ValidationFailed (bad words, filters or cursor)."""
    others = {key: value for key, value in filters.items() if key != "q"}
    runs = run_search.execution_search(tenant=tenant, filters=others, root_ids=root_ids)
    since, _until = run_search.time_range(others)
    position = cursor_decode(cursor) if cursor else None
    anchor = position[0] if position else timezone.now()

    def search(start):
        floor = max(start, since) if start and since else (start or since)
        rows = runs.filter(
            id__in=executions_with_log_words(tenant=tenant, words=words, runs_since=floor)
        )
        if start is not None:
            rows = rows.filter(scheduled_at__gte=start)
        rows = rows.order_by("-scheduled_at", "-id")
        if position:
            at, row_id = position
            rows = rows.filter(Q(scheduled_at__lt=at) | Q(scheduled_at=at, id__lt=row_id))
        return list(rows[: size + 1])

    found: list[TaskExecution] = []
    # The windows end with the whole history (None), so the loop always reads a page.
    for start in newest_first_windows(
        tenant=tenant, words=words, anchor=anchor, wanted=2 * (size + 1), runs=runs
    ):
        found = search(start)
        if start is None or len(found) > size:
            break
    items = found[:size]
    more = len(found) > size
    last = items[-1] if more else None
    return LogHitsPage(
        items=items, next_cursor=cursor_encode(last.scheduled_at, last.id) if last else None
    )


_QUOTED = re.compile(r'"([^"]*)"')


def search_terms(words: str) -> list[str]:
    """The words and phrases a matching line shows (lowercase): quoted phrases whole, other
    words one by one; `-excluded` words and `or` are not shown as matches."""
    phrases = [phrase.strip().lower() for phrase in _QUOTED.findall(words) if phrase.strip()]
    rest = _QUOTED.sub(" ", words)
    single = [
        word.lower()
        for word in rest.split()
        if not word.startswith("-") and word.lower() != "or" and word.strip("-")
    ]
    return list(dict.fromkeys([*phrases, *single]))


def log_hit_lines(
    *, tenant: Tenant, execution_ids: Iterable[uuid.UUID], words: str
) -> dict[uuid.UUID, list[str]]:
    """Up to HIT_LINES lines (each cut to HIT_LINE_CHARS) of each run's stored log that hold a
    word of the search, in one query over the tenant's logs of those runs."""
    terms = search_terms(words)
    ids = list(execution_ids)
    if not ids or not terms:
        return {}
    heads = (
        ExecutionLog.objects.filter(tenant=tenant, execution_id__in=ids)
        .annotate(head=Substr("text", 1, SEARCHABLE_CHARS))
        .values_list("execution_id", "head")
    )
    hits: dict[uuid.UUID, list[str]] = {}
    for execution_id, head in heads:
        lines = []
        for line in (head or "").splitlines():
            lowered = line.lower()
            if any(term in lowered for term in terms):
                lines.append(line[:HIT_LINE_CHARS])
                if len(lines) >= HIT_LINES:
                    break
        hits[execution_id] = lines
    return hits
