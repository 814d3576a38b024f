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
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db.models import QuerySet
from django.db.models.functions import Left

from scheduler_app.errors import ValidationFailed
from scheduler_app.models import ExecutionLog, Tenant

SEARCHABLE_CHARS = 262_144
MAX_QUERY_CHARS = 200


def log_search_vector() -> SearchVector:
    return SearchVector(Left("text", SEARCHABLE_CHARS), config="simple")


def executions_with_log_words(*, tenant: Tenant, words: str) -> QuerySet:
    """The ids of the tenant's executions whose stored log has every word of `words`
    (web-search syntax: "quoted phrase", -excluded, or)."""
    words = (words or "").strip()
    if not words or len(words) > MAX_QUERY_CHARS:
        raise ValidationFailed(
            f"log_contains must be 1 to {MAX_QUERY_CHARS} characters", field="log_contains"
        )
    return logs_with_words(words).filter(tenant=tenant).values("execution_id")


def logs_with_words(words: str) -> QuerySet[ExecutionLog]:
    """Every tenant's logs with the words: callers narrow it to one tenant."""
    query = SearchQuery(words, config="simple", search_type="websearch")
    return ExecutionLog.objects.annotate(words=log_search_vector()).filter(words=query)
