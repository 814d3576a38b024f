"""Live log tail: lines go to a capped Redis stream per execution while the run goes.

Only lines the size-capped sink keeps are streamed (plus its truncation marker), so the
stream of one execution never holds more than the log cap, however much a task prints.
Lines are sent by a side thread in pipelined batches: a chatty task costs one round trip
per flush, not one per line. The stream expires a while after the run ends; the persisted
ExecutionLog is the record.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key
from workers.handlers.base import BufferedLogSink

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.2
BATCH_LINES = 500


def log_stream_key(execution_id: str) -> str:
    return redis_key(f"logs:{execution_id}")


class LiveLogSink:
    """A BufferedLogSink (the persisted copy) that also tails into Redis."""

    def __init__(self, *, execution_id: str, max_bytes: int, secrets: tuple[str, ...] = ()) -> None:
        # Masking happens in the buffer, so the live tail never sees a secret either.
        self.buffer = BufferedLogSink(max_bytes=max_bytes, secrets=secrets)
        self._key = log_stream_key(execution_id)
        self._pending: deque[str] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._max_lines = settings.FLEET["LOG_STREAM_MAX_LINES"]
        self._ttl = settings.FLEET["LOG_STREAM_TTL_SECONDS"]
        self._thread = threading.Thread(target=self._run, name="log-tail", daemon=True)

    # LogSink protocol ---------------------------------------------------------------
    def write(self, stream: str, line: str) -> None:
        if self.buffer.truncated:
            self.buffer.write(stream, line)  # only counted
            return
        with self._lock:
            self.buffer.write(stream, line)
            # The buffer appended exactly one line (the new one, or its truncation marker).
            self._pending.append(self.buffer.last_line_rendered())

    # lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> LiveLogSink:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._flush()

    def end(self, *, status: str) -> None:
        """Tell followers the run is over (sent after the final status is committed)."""
        try:
            client = get_redis()
            pipe = client.pipeline(transaction=False)
            pipe.xadd(self._key, {"end": status}, maxlen=self._max_lines + 1, approximate=True)
            pipe.expire(self._key, self._ttl)
            pipe.execute()
        except Exception:
            logger.exception("could not close the log stream %s", self._key)

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            self._flush()

    def _flush(self) -> None:
        while True:
            with self._lock:
                batch = [
                    self._pending.popleft() for _ in range(min(BATCH_LINES, len(self._pending)))
                ]
            if not batch:
                return
            try:
                pipe = get_redis().pipeline(transaction=False)
                for line in batch:
                    pipe.xadd(self._key, {"line": line}, maxlen=self._max_lines, approximate=True)
                pipe.expire(self._key, self._ttl)
                pipe.execute()
            except Exception:  # the tail is best effort; the persisted log is the record
                logger.exception("live log tail of %s failed", self._key)
                return
