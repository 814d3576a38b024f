"""Search in stored execution logs: PostgreSQL full-text search.

Why full-text search and not pg_trgm: a query is a few words ("timeout", "connection
refused"), and a GIN index on a `tsvector` holds each distinct word of a log once, while a
trigram index holds every three-character window of the text; on logs that run to megabytes
the trigram index is several times larger and costlier to keep up on every finish (which
writes a log). The `simple` configuration neither stems nor drops stop words, so a search
finds the words as they were logged (error codes, host names, `ECONNREFUSED`). What it
cannot do is find a fragment inside a word; trigrams would.

PostgreSQL caps a `tsvector` at 1 MB, and a log can hold 10 MB: the index (and so the
search) covers the first SEARCHABLE_CHARS characters of each log. The expression here and
the index's (`ExecutionLog.Meta`) must stay the same for the index to be used.

Newest first at 10M runs. A GIN index answers "which logs have these words" as a bitmap of
every match, unordered: a page of the newest 50 costs as many rows as the words have matches
in the whole history (20,000 for two words that meet in 1 log in 500, at 10M), and the
other way round (walk the runs newest first, test each log) costs 50 / selectivity rows. So
a second index holds the tenant and the hour each log was written (one key per hour; the
planner ANDs it with the words' bitmap), and a newest-first page is asked of recent
windows first (SEARCH_WINDOWS, see `scheduler_app.api.log_search_pages`): a window's cost
is the rows logged in it, not the history's size, and the whole history is read only when
the windows do not fill the page (words too rare for them, whose match bitmap is small).

A window on the log's time stands for a window on the run's: a log is written when its run
finishes, after the run was created and claimed, and no claim takes a run due more than
`CLAIM_CLOCK_TOLERANCE` later; LOG_WRITE_SLACK is far above that (and clock differences).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db.models import QuerySet
from django.db.models.functions import Left

from scheduler_app.errors import ValidationFailed
from scheduler_app.models import ExecutionLog, Tenant
from scheduler_app.models.execution import LogHour

SEARCHABLE_CHARS = 262_144
MAX_QUERY_CHARS = 200
# How much earlier than its run's time (scheduled or created) a log may be written, at most.
LOG_WRITE_SLACK = timedelta(hours=1)
# The recent windows a newest-first search tries, in turn, before the whole history.
SEARCH_WINDOWS = (timedelta(hours=1), timedelta(days=1), timedelta(days=16))
# Words the planner expects in fewer logs than this (its estimate from the index's
# statistics) are read from the whole history at once: the windows would only add queries.
FEW_MATCHES = 1000


def log_search_vector() -> SearchVector:
    return SearchVector(Left("text", SEARCHABLE_CHARS), config="simple")


def executions_with_log_words(
    *, tenant: Tenant, words: str, runs_since: datetime | None = None
) -> QuerySet:
    """The ids of the tenant's executions whose stored log has every word of `words`
    (web-search syntax: "quoted phrase", -excluded, or). With `runs_since`, only logs that
    can belong to runs scheduled (or created) since then: a superset of those runs' logs."""
    words = (words or "").strip()
    if not words or len(words) > MAX_QUERY_CHARS:
        raise ValidationFailed(
            f"log_contains must be 1 to {MAX_QUERY_CHARS} characters", field="log_contains"
        )
    logs = logs_with_words(words).filter(tenant=tenant)
    if runs_since is not None:
        # The index holds the hour: every log written since `earliest` is in an hour at or
        # after earliest's.
        earliest = (runs_since - LOG_WRITE_SLACK).astimezone(UTC)
        logs = logs.alias(hour=LogHour("created_at")).filter(
            hour__gte=earliest.replace(minute=0, second=0, microsecond=0)
        )
    return logs.values("execution_id")


def expected_matches(*, tenant: Tenant, words: str) -> float:
    """How many of the tenant's logs the planner expects to hold the words (EXPLAIN only:
    nothing is read but the statistics)."""
    plan = json.loads(logs_with_words(words).filter(tenant=tenant).explain(format="json"))
    return plan[0]["Plan"]["Plan Rows"]


def logs_with_words(words: str) -> QuerySet[ExecutionLog]:
    """Every tenant's logs with the words: callers narrow it to one tenant."""
    query = SearchQuery(words, config="simple", search_type="websearch")
    return ExecutionLog.objects.annotate(words=log_search_vector()).filter(words=query)
