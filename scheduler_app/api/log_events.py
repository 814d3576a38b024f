"""Server-Sent Events for an execution's log: follow the live Redis stream while the run
goes, end when it finishes. A run that ended long ago (stream expired) is served from the
persisted log, so a client can use one code path for live and finished runs.

Events: `data: <log line>` (id = stream id, so `Last-Event-ID` resumes), `event: progress`
with the run's latest `{percent, message, updated_at}` as JSON, `event: end` with the final
status, and a `: keepalive` comment every few seconds through idle proxies.

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

import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import StreamingHttpResponse

from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.services.log_followers import (
    LogFollower,
    log_follower_close,
    log_follower_open,
    log_follower_renew,
)
from workers.live_logs import log_stream_key

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
    if "end" in fields:
        return _event(fields["end"], event="end", event_id=entry_id), True
    if "progress" in fields:
        return progress_event(fields["progress"], event_id=entry_id), False
    return _event(fields.get("line", ""), event_id=entry_id), False


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


async def _status(execution_id) -> str:
    def read() -> str | None:
        return (
            TaskExecution.objects.filter(id=execution_id).values_list("status", flat=True).first()
        )

    return await sync_to_async(_read_and_close, thread_sensitive=False)(read) or "unknown"


async def _persisted(execution_id) -> AsyncIterator[str]:
    def read() -> ExecutionLog | None:
        return ExecutionLog.objects.filter(execution_id=execution_id).first()

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
    *, execution_id, last_event_id: str | None = None, follower: LogFollower
) -> AsyncIterator[str]:
    # A connection of its own: XREAD BLOCK holds it, and it lives in this stream's loop.
    client = redis.asyncio.Redis.from_url(
        settings.REDIS_URL, decode_responses=True, socket_connect_timeout=5
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
        while time.monotonic() - started < MAX_FOLLOW_SECONDS:
            response = await client.xread({key: cursor}, count=READ_COUNT, block=BLOCK_MILLISECONDS)
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
                    yield _event(status, event="end")
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
        follow_log(execution_id=execution.id, last_event_id=last_event_id, follower=follower),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
