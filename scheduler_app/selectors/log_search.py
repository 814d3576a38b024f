"""Search in stored execution logs: PostgreSQL full-text search.

Why full-text search and not pg_trgm: a query is a few words ("timeout", "connection
refused"), and a GIN index on a `tsvector` holds each distinct word of a log once, while a
trigram index holds every three-character window of the text; on logs that run to megabytes
the trigram index is several times larger and costlier to keep up on every finish (which
writes a log). The `simple` configuration neither stems nor drops stop words, so a search
finds the words as they were logged (error codes, host names, `ECONNREFUSED`). What it
cannot do is find a fragment inside a word; trigrams would.

The words are stored (`ExecutionLog.words`, derived from the text by PostgreSQL on every
write, migration 0020) and indexed (GIN): a log the index returns is checked against its
stored, parsed words. Parsing the text at search time instead cost `to_tsvector` of up to
256 KB per candidate row (34 s for a common word over 800 such logs). PostgreSQL caps a
`tsvector` at 1 MB, and a log can hold 10 MB: the words (and so the search) cover the first
SEARCHABLE_CHARS characters of each log.

What a search may cost is bounded apart (`scheduler_app.selectors.log_search_budget`): a statement
timeout over the whole search and a number of searches per tenant at once.

Newest first at 10M runs. A GIN index answers "which logs have these words" as a bitmap of
every match, unordered: a page of the newest 50 costs as many rows as the words have matches
in the whole history (20,000 for two words that meet in 1 log in 500, at 10M), and the
other way round (walk the runs newest first, test each log) costs 50 / selectivity rows. So
a second index holds the tenant and the hour each log was written (one key per hour; the
planner ANDs it with the words' bitmap), and a newest-first page is asked of recent
windows first (SEARCH_WINDOWS, see `scheduler_app.selectors.log_search_windows`): a window's cost
is the rows logged in it, not the history's size, and the whole history is read only when
the windows do not fill the page (words too rare for them, whose match bitmap is small).

Words in most logs. A GIN index reads the whole posting list of every word in a query, and
a word in every log (`host` in `host-7`, which the parser splits into `host` and `-7`) has a
posting list as long as the history, read whatever the window: the bench's two words
(`host-7 eu-3`: `host`, `-7`, `eu`, `-3`) read 603 index pages in 60 ms at 1M logs, their
two rarer lexemes alone 7 ms, and it grows with the history. So the index is asked only for
the query's words in fewer than COMMON_WORD_SHARE of the logs (by the statistics of the
words column; always at least the rarest word), and each log it returns is checked against
the whole query (every word, the phrase order): the same logs, found from the short posting
lists.
Only queries of words and phrases are narrowed so; a query with `or` or `-excluded` asks
the index as written.

A window on the log's time stands for a window on the run's: a log is written when its run
finishes, after the run was created and claimed, and its created_at is the finish's time but
never before the run's scheduled_at or created_at (the finish writes the greatest of the
three, `scheduler_app.services.executions`), so whatever the workers' clocks, a run's log is
in the window of the run's time; LOG_WRITE_SLACK is a margin on top (an older log, written
before that rule, by a run claimed at most `CLAIM_CLOCK_TOLERANCE` early, is within it too).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from django.contrib.postgres.search import SearchQuery, SearchQueryField
from django.db import connection
from django.db.models import BooleanField, F, Func, QuerySet, Value

from scheduler_app.errors import ValidationFailed
from scheduler_app.models import ExecutionLog, Tenant
from scheduler_app.models.execution import LogHour

# The share of each log the stored words cover (the trigger's, migration 0020).
SEARCHABLE_CHARS = 262_144
MAX_QUERY_CHARS = 200
# How much earlier than its run's time (scheduled or created) a log may be written, at most.
LOG_WRITE_SLACK = timedelta(hours=1)
# The recent windows a newest-first search tries, in turn, before the whole history.
SEARCH_WINDOWS = (timedelta(hours=1), timedelta(days=1), timedelta(days=16))
# Words the planner expects in fewer logs than this (its estimate from the index's
# statistics) are read from the whole history at once: the windows would only add queries.
FEW_MATCHES = 1000
# Words in this share of the logs or more are not looked up in the index, only checked in
# the logs it returns (see "Words in most logs" above): each leaves at least half of the
# candidates standing while costing the longest posting lists to read.
COMMON_WORD_SHARE = 0.5
WORD_INDEX = "idx_log_search_words"


def executions_with_log_words(
    *, tenant: Tenant, words: str, runs_since: datetime | None = None, estimate: bool = False
) -> QuerySet:
    """The ids of the tenant's executions whose stored log has every word of `words`
    (web-search syntax: "quoted phrase", -excluded, or). With `runs_since`, only logs that
    can belong to runs scheduled (or created) since then: a superset of those runs' logs.
    `estimate`: the query as the planner estimates its matches best (the whole query on the
    index: the same rows), for EXPLAIN; not narrowed to the index's rarer words."""
    words = (words or "").strip()
    if not words or len(words) > MAX_QUERY_CHARS:
        raise ValidationFailed(
            f"log_contains must be 1 to {MAX_QUERY_CHARS} characters", field="log_contains"
        )
    logs = (_logs_matching(words) if estimate else logs_with_words(words)).filter(tenant=tenant)
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
    plan = json.loads(_logs_matching(words).filter(tenant=tenant).explain(format="json"))
    return plan[0]["Plan"]["Plan Rows"]


def logs_with_words(words: str) -> QuerySet[ExecutionLog]:
    """Every tenant's logs with the words: callers narrow it to one tenant. The index is
    asked for the query's rarer words (`index_words`), each log it returns is checked
    against the whole query."""
    lookup = index_words(words)
    if lookup is None:
        return _logs_matching(words)
    return ExecutionLog.objects.filter(
        _Matches(F("words"), _TsQuery(Value(lookup))),
        _Recheck(F("words"), _websearch(words)),
    )


def index_words(words: str) -> str | None:
    """The words of the query to look up in the index, as a tsquery of ANDed lexemes, when
    the query is only words and phrases (every lexeme is in every log it matches) and some of
    its lexemes are in COMMON_WORD_SHARE of the logs or more: those are left to the check of
    each log found, but the rarest lexeme is always looked up. None: ask the whole query."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT websearch_to_tsquery('simple', %s)::text, ("
            "  SELECT coalesce(json_object_agg(u.lexeme, u.share), '{}')"
            "  FROM pg_stats s, unnest(s.most_common_elems::text::text[],"
            "                          s.most_common_elem_freqs) AS u(lexeme, share)"
            "  WHERE s.schemaname = current_schema() AND s.tablename = %s"
            "    AND s.attname = 'words'"
            "    AND u.lexeme = ANY(tsvector_to_array(to_tsvector('simple', %s))))",
            [words, ExecutionLog._meta.db_table, words],
        )
        query, shares = cursor.fetchone()
    if isinstance(shares, str):
        shares = json.loads(shares)
    lexemes = _and_lexemes(query)
    if not lexemes:
        return None
    # Lexemes the statistics do not keep are rarer than any they keep.
    by_share = sorted(set(lexemes), key=lambda quoted: shares.get(_unquote(quoted), 0.0))
    kept = [by_share[0]] + [
        quoted for quoted in by_share[1:] if shares.get(_unquote(quoted), 0.0) < COMMON_WORD_SHARE
    ]
    if len(kept) == len(by_share):
        return None  # no common word: the whole query on the index is as cheap
    return " & ".join(kept)


# A lexeme as a tsquery prints it ('it''s'), and what may stand between lexemes in a query
# of words and phrases only (no `|`, no `!`).
_LEXEME = re.compile(r"'(?:[^'\\]|''|\\.)*'")
_AND_ONLY = re.compile(r"^(?:\s|&|<\d+>|<->|\(|\))*$")


def _and_lexemes(query: str) -> list[str]:
    """The quoted lexemes of a tsquery whose operators are only AND and phrase (each of its
    lexemes is in every log it matches); [] for any other (or an empty) query."""
    lexemes = _LEXEME.findall(query)
    if not lexemes or not _AND_ONLY.match(_LEXEME.sub(" ", query)):
        return []
    return lexemes


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1].replace("''", "'"))


def _websearch(words: str) -> SearchQuery:
    return SearchQuery(words, config="simple", search_type="websearch")


def _logs_matching(words: str) -> QuerySet[ExecutionLog]:
    """The logs with the words, the whole query asked of the index (what the planner
    estimates best)."""
    return ExecutionLog.objects.filter(words=_websearch(words))


class _TsQuery(Func):
    """A tsquery taken as written (its lexemes already normalised)."""

    template = "(%(expressions)s)::tsquery"
    output_field = SearchQueryField()


class _Matches(Func):
    """vector @@ query, which the word index answers."""

    arg_joiner = " @@ "
    template = "(%(expressions)s)"
    output_field = BooleanField()


class _Recheck(Func):
    """vector @@ query as a function call: checked on each row, never asked of the index."""

    function = "ts_match_vq"
    output_field = BooleanField()
