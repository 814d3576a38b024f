"""Server-Sent Events for an execution's log: follow the live Redis stream while the run
goes, end when it finishes. A run that ended long ago (stream expired) is served from the
persisted log, so a client can use one code path for live and finished runs.

Events: `data: <log line>` (id = stream id, so `Last-Event-ID` resumes), `event: progress`
with the run's latest `{percent, message, updated_at}` as JSON, `event: end` with the final
status, and a `: keepalive` comment every few seconds through idle proxies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.db import close_old_connections
from django.http import StreamingHttpResponse

from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.redis_client import get_redis
from workers.live_logs import log_stream_key

BLOCK_MILLISECONDS = 1000
KEEPALIVE_SECONDS = 10.0
READ_COUNT = 500
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


def progress_event(payload: str, *, event_id: str) -> str:
    """`event: progress` with the run's `{percent, message, updated_at}` as JSON data."""
    return _event(payload, event="progress", event_id=event_id)


def _status(execution_id) -> str:
    close_old_connections()
    return (
        TaskExecution.objects.filter(id=execution_id).values_list("status", flat=True).first()
        or "unknown"
    )


def follow_log(*, execution: TaskExecution, last_event_id: str | None = None) -> Iterator[str]:
    client = get_redis()
    key = log_stream_key(str(execution.id))
    cursor = last_event_id or "0-0"
    started = last_beat = time.monotonic()
    seen_stream = False
    yield ": following\n\n"
    while time.monotonic() - started < MAX_FOLLOW_SECONDS:
        response = client.xread({key: cursor}, count=READ_COUNT, block=BLOCK_MILLISECONDS)
        for _stream, entries in response or []:
            seen_stream = True
            for entry_id, fields in entries:
                cursor = entry_id
                if "end" in fields:
                    yield _event(fields["end"], event="end", event_id=entry_id)
                    return
                if "progress" in fields:
                    yield progress_event(fields["progress"], event_id=entry_id)
                    continue
                yield _event(fields.get("line", ""), event_id=entry_id)
        if response:
            continue
        status = _status(execution.id)
        if status in TERMINAL_STATUSES:
            if not seen_stream and cursor == "0-0":
                yield from _persisted(execution)
            yield _event(status, event="end")
            return
        if time.monotonic() - last_beat > KEEPALIVE_SECONDS:
            last_beat = time.monotonic()
            yield ": keepalive\n\n"
    yield _event("follow time limit reached; reconnect to continue", event="timeout")


def log_event_stream_response(
    *, execution: TaskExecution, last_event_id: str | None
) -> StreamingHttpResponse:
    """The Server-Sent Events response following `execution`'s log (API and dashboard)."""
    response = StreamingHttpResponse(
        follow_log(execution=execution, last_event_id=last_event_id),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


def _persisted(execution: TaskExecution) -> Iterator[str]:
    log = ExecutionLog.objects.filter(execution_id=execution.id).first()
    if log is not None:
        for line in log.text.splitlines():
            yield _event(line)
