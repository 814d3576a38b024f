"""What one log search may cost: a time budget and a number of searches per tenant at once.

Why both. The stored words make an ordinary search cheap, but some stay costly whatever the
index: a word excluded from every log (`-ok`) or a phrase of words in every log walks the
whole history to fill a page that never fills. A viewer could start those in a loop, and
searches read the database that every tenant's runs are claimed and finished in.

- Time: the whole search (its estimates, its windows, the page) runs in one transaction
  whose `statement_timeout` is set, before each statement, to what is left of
  LOG_SEARCH["TIMEOUT_SECONDS"]; PostgreSQL cancels the statement that overruns. The search
  answers 503 `log_search_timeout`, saying to narrow it (a time range, a task, rarer words).
  JIT is off in that transaction: its compile time is not interruptible (see below).
- Concurrency: at most LOG_SEARCH["MAX_CONCURRENT_PER_TENANT"] searches of one tenant at
  once, API and dashboard together. One Redis sorted set per tenant, a member per search in
  flight scored with the end of its lease; taking a place drops the expired members and adds
  one only below the cap, in one script (two searches racing for the last place cannot both
  get it). A search gives its place back when it ends; the place of a web process killed
  mid-search frees itself when its lease ends (a search cannot outlive its time budget, so
  the lease is that plus a margin). Over the cap: 429 `too_many_log_searches`, Retry-After
  the time budget (by then every search in flight has ended).
- Redis unreachable: searches are refused (503 `log_search_unavailable`, Retry-After),
  failing closed. Failing open would leave nothing bounding how many searches run at once,
  each still costing up to the time budget of the shared database's CPU; refusing a
  convenience read while Redis is down (when runs cannot be rung either) costs little.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import OperationalError, connection, transaction

from scheduler_app.errors import DomainError, OverBudget
from scheduler_app.monitoring.counters import record_budget_refusal
from scheduler_app.redis_client import get_redis, redis_key

# A place outlives its search's time budget by this much at most (a killed web process).
LEASE_MARGIN_SECONDS = 30.0
# PostgreSQL's SQLSTATE for a statement cancelled by statement_timeout.
QUERY_CANCELED = "57014"

_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class LogSearchTimedOut(DomainError):
    status_code = 503
    code = "log_search_timeout"


class TooManyLogSearches(OverBudget):
    code = "too_many_log_searches"


class LogSearchUnavailable(DomainError):
    status_code = 503
    code = "log_search_unavailable"


@dataclass(frozen=True)
class SearchPlace:
    key: str
    member: str


def _timeout_seconds() -> float:
    return float(settings.LOG_SEARCH["TIMEOUT_SECONDS"])


def _places_key(tenant_id: object) -> str:
    return redis_key(f"log-searches:{tenant_id}")


def log_search_place_take(*, tenant_id: object, now: float | None = None) -> SearchPlace:
    """One of the tenant's places for a search, or TooManyLogSearches (429). `now`: the
    Unix time its lease starts at (the current time)."""
    cap = int(settings.LOG_SEARCH["MAX_CONCURRENT_PER_TENANT"])
    place = SearchPlace(key=_places_key(tenant_id), member=uuid.uuid4().hex)
    lease = _timeout_seconds() + LEASE_MARGIN_SECONDS
    now = time.time() if now is None else now
    try:
        taken = get_redis().eval(
            _TAKE, 1, place.key, now, now + lease, place.member, cap, int(lease) + 1
        )
    except redis.RedisError as error:
        raise LogSearchUnavailable(
            "log search is unavailable while its counter (Redis) cannot be reached; retry shortly",
            retry_after=5,
        ) from error
    if not taken:
        record_budget_refusal(tenant_id=str(tenant_id), budget="log_search_concurrency")
        raise TooManyLogSearches(
            f"this tenant already runs {cap} log searches at once; retry when one has ended",
            field="log_contains",
            retry_after=_timeout_seconds(),
        )
    return place


def log_search_place_give_back(place: SearchPlace) -> None:
    with contextlib.suppress(redis.RedisError):  # if not now, the lease frees it
        get_redis().zrem(place.key, place.member)


def log_searches_running(*, tenant_id: object) -> int:
    """The tenant's searches in flight (unexpired places)."""
    return get_redis().zcount(_places_key(tenant_id), time.time(), "+inf")


@contextmanager
def log_search_budget(*, tenant_id: object) -> Iterator[None]:
    """Run a search (every query inside the block) within the tenant's budget: a place among
    its concurrent searches, and the time budget over all its statements."""
    place = log_search_place_take(tenant_id=tenant_id)
    try:
        with _time_budget(_timeout_seconds()):
            yield
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) != QUERY_CANCELED:
            raise
        record_budget_refusal(tenant_id=str(tenant_id), budget="log_search_timeout")
        raise _timed_out() from error
    except LogSearchTimedOut:
        record_budget_refusal(tenant_id=str(tenant_id), budget="log_search_timeout")
        raise
    finally:
        log_search_place_give_back(place)


def _timed_out() -> LogSearchTimedOut:
    return LogSearchTimedOut(
        f"the log search took longer than its {_timeout_seconds():g} s budget and was "
        "stopped; narrow it: a shorter time range (since/until), one task, or rarer words",
        field="log_contains",
    )


@contextmanager
def _time_budget(seconds: float) -> Iterator[None]:
    """The block's statements share `seconds`: each runs under a statement_timeout of what
    is left (SET LOCAL, so it ends with the transaction; one more round trip a statement)."""
    deadline = time.monotonic() + seconds
    nested = connection.in_atomic_block

    def within_budget(execute, sql, params, many, context):
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise _timed_out()
        # The driver's cursor: the wrapped one would come back through this function.
        context["cursor"].cursor.execute(f"SET LOCAL statement_timeout = {left_ms}")
        return execute(sql, params, many, context)

    with transaction.atomic(), connection.execute_wrapper(within_budget):
        with connection.cursor() as cursor:
            # JIT compiles a costly plan before running it, and no timeout interrupts that:
            # a walk of 10M logs spent 1.2 s compiling, past a 0.5 s budget.
            cursor.cursor.execute("SET LOCAL jit = off")
        yield
        if nested:
            # A savepoint released keeps its SET LOCAL for the enclosing transaction.
            with connection.cursor() as cursor:
                cursor.cursor.execute("SET LOCAL statement_timeout TO DEFAULT")
                cursor.cursor.execute("SET LOCAL jit TO DEFAULT")
