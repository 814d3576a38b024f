"""Live log tail: lines go to a capped Redis stream per execution while the run goes.

Only lines the size-capped sink keeps are streamed (plus its truncation marker), so the
stream of one execution never holds more than the log cap, however much a task prints.
Lines are sent by the process's run watcher (`workers.run_watch`) in pipelined batches: a
chatty task costs one round trip per flush, not one per line. The stream expires a while
after the run ends; the persisted ExecutionLog is the record.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from django.conf import settings

from handler_contract.base import BufferedLogSink
from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.2
BATCH_LINES = 500


def log_stream_key(execution_id: str) -> str:
    return redis_key(f"logs:{execution_id}")


class LiveLogSink:
    """A BufferedLogSink (the persisted copy) that also tails into Redis.

    Lines wait in memory until the process's run watcher flushes them (every FLUSH_SECONDS)
    or the run ends: `close_into` queues what is left and the end marker on the runner's
    end-of-run pipeline."""

    def __init__(self, *, execution_id: str, max_bytes: int, secrets: tuple[str, ...] = ()) -> None:
        # Masking happens in the buffer, so the live tail never sees a secret either.
        self.buffer = BufferedLogSink(max_bytes=max_bytes, secrets=secrets)
        self._key = log_stream_key(execution_id)
        self._pending: deque[str] = deque()
        self._lock = threading.Lock()
        # Held while lines are taken and sent, so batches reach the stream in order.
        self._send_lock = threading.Lock()
        self._streamed = False  # a line went to the stream: it exists and needs its end
        self._max_lines = settings.FLEET["LOG_STREAM_MAX_LINES"]
        self._ttl = settings.FLEET["LOG_STREAM_TTL_SECONDS"]

    # LogSink protocol ---------------------------------------------------------------
    def write(self, stream: str, line: str) -> None:
        if self.buffer.truncated:
            self.buffer.write(stream, line)  # only counted
            return
        with self._lock:
            self.buffer.write(stream, line)
            # The buffer appended exactly one line (the new one, or its truncation marker).
            self._pending.append(self.buffer.last_line_rendered())

    # sending --------------------------------------------------------------------------
    def _take(self, limit: int) -> list[str]:
        with self._lock:
            return [self._pending.popleft() for _ in range(min(limit, len(self._pending)))]

    def _lines_into(self, pipe, lines: list[str]) -> None:
        if lines:
            self._streamed = True
        for line in lines:
            pipe.xadd(self._key, {"line": line}, maxlen=self._max_lines, approximate=True)

    def flush(self) -> None:
        """Send the buffered lines (the run watcher calls this while the run goes)."""
        with self._send_lock:
            while self._pending:
                batch = self._take(BATCH_LINES)
                try:
                    pipe = get_redis().pipeline(transaction=False)
                    self._lines_into(pipe, batch)
                    pipe.expire(self._key, self._ttl)
                    pipe.execute()
                except Exception:  # the tail is best effort; the persisted log is the record
                    logger.exception("live log tail of %s failed", self._key)
                    return

    def close_into(self, pipe, *, status: str) -> None:
        """Queue the lines not sent yet and the end marker that tells followers the run is
        over (the runner sends it after the final status is committed); nothing for a run
        that never wrote a line."""
        with self._send_lock:  # waits for a flush in progress: lines stay in order
            lines = self._take(len(self._pending))
        self._lines_into(pipe, lines)
        if not self._streamed:
            # A silent run has no stream: a follower sees the final status in the database
            # (and the stored log) on its next idle poll. No key is created for nothing.
            return
        pipe.xadd(self._key, {"end": status}, maxlen=self._max_lines + 1, approximate=True)
        pipe.expire(self._key, self._ttl)
