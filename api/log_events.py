"""Server-Sent Events for an execution's log: follow the live stream (on the live-log Redis,
`scheduler_app.live_logs`) while the run goes, end when it finishes. A finished run is
served from the persisted log (its stream is deleted shortly after it ends), so a client can
use one code path for live and finished runs.

Events: `data: <log line>` (id = stream id, so `Last-Event-ID` resumes), `event: progress`
with the run's latest `{percent, message, updated_at}` as JSON, `event: cut` when the run's
or its tenant's live-log budget is spent (the stored log, sent when the run ends, has the
rest), `event: end` with the final status, and a `: keepalive` comment every few seconds
through idle proxies.

The stream is an async iterator read with redis.asyncio: under the ASGI server (gunicorn
with uvicorn workers) an open stream waits on Redis inside the event loop and holds neither
a worker nor a thread, so hundreds of viewers do not delay other requests. The view that
returns it stays synchronous (authentication, tenant checks); a tenant's open streams are
capped (`scheduler_app.services.log_followers`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import StreamingHttpResponse

from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.live_logs import CUT, END, LINE, PROGRESS, live_logs_async_client, log_stream_key
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.redis_client import async_redis_from_url, redis_connect_url
from scheduler_app.services.log_followers import (
    LogFollower,
    log_follower_close,
    log_follower_open,
    log_follower_renew,
)

BLOCK_MILLISECONDS = 1000
KEEPALIVE_SECONDS = 10.0
# The worker ends its stream with an `end` entry; the database is asked only this often,
# for a run whose worker died or whose stream expired.
STATUS_CHECK_SECONDS = 5.0
READ_COUNT = 500
T = TypeVar("T")
# An SSE connection is not kept open for ever: clients reconnect with Last-Event-ID.
MAX_FOLLOW_SECONDS = 3600.0


def _event(data: str, *, event: str | None = None, event_id: str | None = None) -> str:
    lines = []
    if event_id:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    lines.extend(f"data: {part}" for part in (data.split("\n") or [""]))
    return "\n".join(lines) + "\n\n"


def stream_entry_event(entry_id: str, fields: dict[str, str]) -> tuple[str, bool]:
    """The SSE event for one entry of the worker's log stream, and whether it is the last.
    Every kind of entry the worker writes is turned into an event here, and only here."""
    if END in fields:
        return _event(fields[END], event=END, event_id=entry_id), True
    if PROGRESS in fields:
        return progress_event(fields[PROGRESS], event_id=entry_id), False
    if CUT in fields:
        return _event(fields[CUT], event=CUT, event_id=entry_id), False
    return _event(fields.get(LINE, ""), event_id=entry_id), False


def progress_event(payload: str, *, event_id: str) -> str:
    """`event: progress` with the run's `{percent, message, updated_at}` as JSON data."""
    return _event(payload, event="progress", event_id=event_id)


def _read_and_close(read: Callable[[], T]) -> T:
    """A database read for a stream, on a pool thread whose connection is closed after it:
    under ASGI a request's own thread would keep a connection for the stream's whole life,
    one per open stream."""
    try:
        return read()
    finally:
        connection.close()


# The stream re-reads by id the execution that log_event_stream_response was given by a
# tenant-scoped selector: the tenant was checked before the stream began.
async def _status(execution_id) -> str:
    def read() -> str | None:
        return (
            TaskExecution.platform.filter(id=execution_id).values_list("status", flat=True).first()
        )

    return await sync_to_async(_read_and_close, thread_sensitive=False)(read) or "unknown"


async def _persisted(execution_id) -> AsyncIterator[str]:
    def read() -> ExecutionLog | None:
        return ExecutionLog.platform.filter(execution_id=execution_id).first()

    log = await sync_to_async(_read_and_close, thread_sensitive=False)(read)
    if log is not None:
        for line in log.text.splitlines():
            yield _event(line)


def _cancelled() -> bool:
    """The ASGI server cancelled this stream (its client went away) but the cancellation was
    swallowed on the way (a blocking Redis read may turn it into a plain return): stop
    anyway, or the stream would follow for nobody and keep its tenant's place."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def follow_log(
    *,
    execution_id,
    last_event_id: str | None = None,
    follower: LogFollower,
    finished: bool = False,
) -> AsyncIterator[str]:
    """`finished`: the run had ended when the stream was asked for; without a Last-Event-ID
    to resume from, its stored log is the answer (the live tail may be cut or gone)."""
    # Connections of their own: XREAD BLOCK holds one, and they live in this stream's loop.
    # The tail is on the live-log Redis; the follower's place on the platform's.
    tails = live_logs_async_client()
    client = async_redis_from_url(
        redis_connect_url(), decode_responses=True, socket_connect_timeout=5
    )
    key = log_stream_key(str(execution_id))
    cursor = last_event_id or "0-0"
    started = last_beat = time.monotonic()
    last_status_check = float("-inf")
    # Renewed well within its lease (a third of it), so an open stream never loses its place.
    renew_every, last_renewal = settings.LOG_STREAMS["LEASE_SECONDS"] / 3, time.monotonic()
    seen_stream = False
    try:
        yield ": following\n\n"
        if finished and last_event_id is None:
            async for event in _persisted(execution_id):
                yield event
            yield _event(await _status(execution_id), event=END)
            return
        while time.monotonic() - started < MAX_FOLLOW_SECONDS:
            response = await tails.xread({key: cursor}, count=READ_COUNT, block=BLOCK_MILLISECONDS)
            if _cancelled():
                return
            for _stream, entries in response or []:
                seen_stream = True
                for entry_id, fields in entries:
                    cursor = entry_id
                    event, last = stream_entry_event(entry_id, fields)
                    yield event
                    if last:
                        return
            if response:
                continue
            if time.monotonic() - last_status_check >= STATUS_CHECK_SECONDS:
                last_status_check = time.monotonic()
                status = await _status(execution_id)
                if status in TERMINAL_STATUSES:
                    if not seen_stream and cursor == "0-0":
                        async for event in _persisted(execution_id):
                            yield event
                    yield _event(status, event=END)
                    return
            if time.monotonic() - last_renewal >= renew_every:
                last_renewal = time.monotonic()
                await log_follower_renew(follower, client)
            if time.monotonic() - last_beat > KEEPALIVE_SECONDS:
                last_beat = time.monotonic()
                yield ": keepalive\n\n"
        yield _event("follow time limit reached; reconnect to continue", event="timeout")
    finally:
        # Also when the client went away: the ASGI server cancels the stream.
        await log_follower_close(follower, client)
        await client.aclose()
        await tails.aclose()


def log_event_stream_response(
    *, execution: TaskExecution, last_event_id: str | None
) -> StreamingHttpResponse:
    """The Server-Sent Events response following `execution`'s log (API and dashboard).
    Raises TooManyLogStreams (429) when the tenant already follows its maximum."""
    follower = log_follower_open(tenant_id=execution.tenant_id)
    # The view's connection goes back now, not when the stream ends (hours later, perhaps).
    if not connection.in_atomic_block:
        connection.close()
    response = StreamingHttpResponse(
        follow_log(
            execution_id=execution.id,
            last_event_id=last_event_id,
            follower=follower,
            finished=execution.status in TERMINAL_STATUSES,
        ),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
