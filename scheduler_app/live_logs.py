"""Live log tails in Redis: one stream per running execution, on a Redis apart from the
broker, under a byte budget per run and per tenant, gone shortly after its run ends.

Why apart: a tail is best effort (the stored ExecutionLog is the record) and its size is in a
tenant's hands. In the broker's Redis, which never evicts, a flood of output filled memory
until Celery's own writes failed (OutOfMemoryError) and dispatch stopped for every tenant.
LIVE_LOGS_REDIS_URL names where tails go: by default another database of REDIS_URL's
server (`make run`); compose and Kubernetes give them a Redis instance of their own that may
evict, so even a misconfigured budget cannot touch the queue.

The budget (LIVE_LOGS["RUN_MAX_BYTES"], ["TENANT_MAX_BYTES"]) is kept by one script on the
live-log Redis, atomically for all the workers writing a tenant's streams. Entries are
counted as what Redis spends on them (see ENTRY_OVERHEAD_BYTES), so the count bounds the
memory the streams really take. The first entry that does not fit ends the tail with a
`cut` entry saying which budget it hit (room for it is kept); a run whose tenant has no room
left gets no tail at all. The run goes on either way, and its stored log keeps every line up
to its own cap (WORKER_LOG_MAX_BYTES).

A stream lives while its run writes (its TTL, LOG_STREAM_TTL_SECONDS, renewed on every
write: a dead worker's stream expires by itself) and LIVE_LOGS["ENDED_TTL_SECONDS"] after
its run ended, long enough for connected followers to read the `end` entry; a follower that
comes later reads the stored log. A tenant's count forgets a stream once its lease (the
same TTL) has passed.

Entries: {"line": text}, {"progress": json}, {"cut": why}, {"end": final status}.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
import redis.asyncio
import redis.commands.core
from django.conf import settings

from scheduler_app.redis_client import async_redis_from_url, redis_from_url, redis_key
from scheduler_app.redis_urls import sentinel_url

LINE = "line"
PROGRESS = "progress"
CUT = "cut"
END = "end"

# What a stream costs Redis beyond its entries' text, from `MEMORY USAGE` of Redis 7.0
# streams of 300 entries of 1 to 9,000 bytes: its first node (4 KiB however little it holds)
# and, per entry, the id and listpack headers plus the slack of nodes that a few entries
# fill badly (two 2,043-byte lines do not fit one 4 KiB node; the allocator rounds up). An
# entry is counted as 1.5 x its text + ENTRY_OVERHEAD_BYTES, a stream once as
# STREAM_BASE_BYTES: at least what Redis holds for it (measured: 30% to 90% of the count;
# tests/integration/test_live_log_budget.py checks it on the real worker's streams).
ENTRY_OVERHEAD_BYTES = 64
STREAM_BASE_BYTES = 5120

_APPEND = """
local stream, runs, total, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local run_id = ARGV[1]
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local run_max, tenant_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local maxlen, overhead, base = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local function cost(text) return math.ceil(#text * 1.5) + overhead end
-- Streams whose lease ran out have expired already (the lease is their TTL): uncount them.
local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 100)
for _, other in ipairs(expired) do
  local bytes = math.abs(tonumber(redis.call('HGET', runs, other) or '0'))
  redis.call('HDEL', runs, other)
  redis.call('ZREM', leases, other)
  if bytes > 0 then redis.call('DECRBY', total, bytes) end
end
local run_used = tonumber(redis.call('HGET', runs, run_id) or '0')
if run_used < 0 then return {0, 1} end
local tenant_used = tonumber(redis.call('GET', total) or '0')
-- Room is kept for the note that says the tail was cut, so that it fits too.
local reserve = math.max(cost('cut' .. ARGV[9]), cost('cut' .. ARGV[10]))
local added, admitted, cut = 0, 0, 0
if run_used == 0 then
  -- A new stream costs its first node however little it holds; none when even that and
  -- its note do not fit (its followers then see the stored log at the end).
  if base + reserve > run_max then return {0, 1} end
  if tenant_used + base + reserve > tenant_max then return {0, 2} end
  added = base
end
for i = 11, #ARGV, 2 do
  local entry = cost(ARGV[i] .. ARGV[i + 1])
  if run_used + added + entry + reserve > run_max then cut = 1 break end
  if tenant_used + added + entry + reserve > tenant_max then cut = 2 break end
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', ARGV[i], ARGV[i + 1])
  added = added + entry
  admitted = admitted + 1
end
if cut > 0 then
  redis.call('XADD', stream, '*', 'cut', ARGV[8 + cut])
  added = added + reserve
end
if added == 0 then return {0, 0} end
redis.call('INCRBY', total, added)
if cut > 0 then
  -- Cut for good: the run's count goes negative (its bytes stay in the tenant's total).
  redis.call('HSET', runs, run_id, -(run_used + added))
else
  redis.call('HINCRBY', runs, run_id, added)
end
redis.call('ZADD', leases, now + ttl, run_id)
redis.call('EXPIRE', stream, ttl)
for _, key in ipairs({runs, total, leases}) do redis.call('EXPIRE', key, ttl) end
return {admitted, cut}
"""

_END = """
local stream, runs, total, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', stream) == 0 then return 0 end
redis.call('XADD', stream, '*', 'end', ARGV[1])
redis.call('EXPIRE', stream, tonumber(ARGV[2]))
-- Still counted until it is gone, then uncounted by the next append of the tenant.
redis.call('ZADD', leases, 'XX', tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[4])
return 1
"""


def log_stream_key(execution_id: str) -> str:
    return redis_key(f"logs:{execution_id}")


def _tenant_keys(tenant_id: object) -> tuple[str, str, str]:
    """The tenant's per-run byte counts, its total and its streams' leases."""
    base = f"logs-budget:{tenant_id}"
    return redis_key(f"{base}:runs"), redis_key(f"{base}:total"), redis_key(f"{base}:leases")


def live_logs_connect_url() -> str:
    """LIVE_LOGS_REDIS_URL; when it was derived from REDIS_URL (another database of the same
    server) and that server is behind Sentinel, its sentinel:// form."""
    if settings.LIVE_LOGS_REDIS_URL_DERIVED and settings.REDIS_SENTINELS:
        return sentinel_url(settings.REDIS_SENTINELS, redis_url=settings.LIVE_LOGS_REDIS_URL)
    return settings.LIVE_LOGS_REDIS_URL


_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}


def live_logs_redis() -> redis.Redis:
    """This process's client of the live-log Redis (anew after a fork)."""
    url = live_logs_connect_url()
    key = (os.getpid(), url)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = redis_from_url(
                    url,
                    decode_responses=True,
                    socket_timeout=5,
                    socket_connect_timeout=5,
                    health_check_interval=30,
                )
    return client


def live_logs_async_client() -> redis.asyncio.Redis:
    """A client of its own for one follower's event loop (XREAD BLOCK holds a connection)."""
    return async_redis_from_url(
        live_logs_connect_url(), decode_responses=True, socket_connect_timeout=5
    )


def _note(budget: str, limit: int) -> str:
    return (
        f"[live log cut: this {budget}'s live-log budget of {limit} bytes is spent; the run "
        "goes on and its stored log, shown when it ends, keeps the rest]"
    )


@dataclass(frozen=True)
class Appended:
    admitted: int  # entries that went to the stream
    cut: bool  # the tail was cut (by the run's or the tenant's budget): send nothing more


class LiveLogStream:
    """One execution's stream: appends under the budget, and its end."""

    def __init__(self, *, execution_id: str, tenant_id: object) -> None:
        self.execution_id = execution_id
        self.key = log_stream_key(execution_id)
        self._tenant_keys = _tenant_keys(tenant_id)
        budgets = settings.LIVE_LOGS
        self._run_max = budgets["RUN_MAX_BYTES"]
        self._tenant_max = budgets["TENANT_MAX_BYTES"]
        self._ended_ttl = budgets["ENDED_TTL_SECONDS"]
        self._ttl = settings.FLEET["LOG_STREAM_TTL_SECONDS"]
        self._max_lines = settings.FLEET["LOG_STREAM_MAX_LINES"]

    def _append_args(self, entries: Sequence[tuple[str, str]], now: float | None) -> list:
        return [
            self.execution_id,
            time.time() if now is None else now,
            self._ttl,
            self._run_max,
            self._tenant_max,
            self._max_lines,
            ENTRY_OVERHEAD_BYTES,
            STREAM_BASE_BYTES,
            _note("run", self._run_max),
            _note("tenant", self._tenant_max),
            *(value for entry in entries for value in entry),
        ]

    def append(self, entries: Sequence[tuple[str, str]], *, now: float | None = None) -> Appended:
        """Send entries ((field, value) pairs) in one round trip; those past the budget are
        dropped and the stream says it was cut. `now`: the clock the leases are read with."""
        if not entries:
            return Appended(admitted=0, cut=False)
        admitted, cut = _append_script()(
            keys=[self.key, *self._tenant_keys], args=self._append_args(entries, now)
        )
        return Appended(admitted=int(admitted), cut=bool(cut))

    def append_into(
        self, pipe, entries: Sequence[tuple[str, str]], *, now: float | None = None
    ) -> None:
        """Queue `append`'s script on `pipe` (of `live_logs_redis()`, several runs' tails in
        one round trip); read its reply with `appended_from`."""
        keys, now = [self.key, *self._tenant_keys], time.time() if now is None else now
        pipe.eval(_APPEND, len(keys), *keys, *self._append_args(entries, now))

    @staticmethod
    def appended_from(reply: Sequence[object]) -> Appended:
        admitted, cut = reply
        return Appended(admitted=int(admitted), cut=bool(cut))

    def close_into(
        self, pipe, entries: Sequence[tuple[str, str]], *, status: str, now: float | None = None
    ) -> None:
        """Queue the last entries and the `end` entry followers stop at on `pipe` (of
        `live_logs_redis()`); the stream then expires soon. The end is written only to a
        stream that exists: not for a run that never wrote, nor one already expired."""
        keys, now = [self.key, *self._tenant_keys], time.time() if now is None else now
        # EVAL, not EVALSHA: redis-py checks a pipeline's scripts with a round trip of their
        # own before sending it; the text costs 2 KB and Redis keeps it compiled.
        if entries:
            pipe.eval(_APPEND, len(keys), *keys, *self._append_args(entries, now))
        pipe.eval(_END, len(keys), *keys, status, self._ended_ttl, now, self.execution_id)


_append_scripts: dict[int, redis.commands.core.Script] = {}


def _append_script() -> redis.commands.core.Script:
    """The append script registered with this process's client (EVALSHA, loaded on a
    NOSCRIPT by redis-py itself)."""
    client = live_logs_redis()
    script = _append_scripts.get(id(client))
    if script is None:
        script = _append_scripts[id(client)] = client.register_script(_APPEND)
    return script


def live_log_bytes_counted(*, tenant_id: object) -> int:
    """The bytes a tenant's live streams are counted for now (operators, tests)."""
    _runs, total, _leases = _tenant_keys(tenant_id)
    return int(live_logs_redis().get(total) or 0)
