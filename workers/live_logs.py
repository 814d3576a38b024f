"""Live log tail: lines go to the execution's stream on the live-log Redis while the run goes
(`scheduler_app.live_logs`: a Redis apart from the broker, a byte budget per run and per
tenant, the stream gone soon after the run ends).

Only lines the size-capped sink keeps are streamed (plus its truncation marker), and only
as long as the budget lasts: past it the stream carries a `cut` entry and nothing more but
its end. Lines are sent by the process's run watcher (`workers.run_watch`) in batches: a
chatty task costs one round trip per flush, not one per line. The persisted ExecutionLog is
the record.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable

from handler_contract.base import BufferedLogSink
from scheduler_app.live_logs import (
    LINE,
    PROGRESS,
    Appended,
    LiveLogStream,
    live_logs_redis,
)

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.2
BATCH_LINES = 500


class LiveLogSink:
    """A BufferedLogSink (the persisted copy) that also tails into the live-log Redis.

    Lines wait in memory until the process's run watcher flushes them (every FLUSH_SECONDS)
    or the run ends: `live_tails_close` sends what is left and the end marker, after the
    runner committed the final status."""

    def __init__(
        self,
        *,
        execution_id: str,
        tenant_id: object,
        max_bytes: int,
        secrets: tuple[str, ...] = (),
    ) -> None:
        # Masking happens in the buffer, so the live tail never sees a secret either.
        self.buffer = BufferedLogSink(max_bytes=max_bytes, secrets=secrets)
        self.stream = LiveLogStream(execution_id=execution_id, tenant_id=tenant_id)
        self._pending: deque[tuple[str, str]] = deque()
        self._lock = threading.Lock()
        # Held while entries are taken and sent, so batches reach the stream in order.
        self._send_lock = threading.Lock()
        self._streamed = False  # an entry went to the stream: it exists and needs its end
        self.cut = False  # the budget is spent: nothing more is streamed
        # Appended to the platform's own lines (stream "system"): the run's trace and span
        # ids while its trace is recorded (`workers.run_traces.trace_ids_log`), else "".
        self.system_suffix = ""
        self.system_suffix_written = False  # a line carried it (else the ids get their own)

    # LogSink protocol ---------------------------------------------------------------
    def write(self, stream: str, line: str) -> None:
        if self.system_suffix and stream == "system":
            line += self.system_suffix
            self.system_suffix_written = True
        if self.buffer.truncated or self.cut:
            self.buffer.write(stream, line)  # only counted, or only stored
            return
        with self._lock:
            self.buffer.write(stream, line)
            # The buffer appended exactly one line (the new one, or its truncation marker).
            self._pending.append((LINE, self.buffer.last_line_rendered()))

    def progress(self, payload: str) -> None:
        """A progress report (JSON) for followers, in line with the log."""
        if self.cut:
            return
        with self._lock:
            self._pending.append((PROGRESS, payload))

    # sending --------------------------------------------------------------------------
    def _take(self, limit: int) -> list[tuple[str, str]]:
        with self._lock:
            return [self._pending.popleft() for _ in range(min(limit, len(self._pending)))]

    def _send(self, entries: list[tuple[str, str]]) -> bool:
        """Append a batch; False when the tail is over (cut, or Redis failed)."""
        if self.cut:
            return False
        try:
            appended = self.stream.append(entries)
        except Exception:  # the tail is best effort; the persisted log is the record
            logger.exception("live log tail of %s failed", self.stream.key)
            return False
        return self._appended(appended)

    def _appended(self, appended: Appended) -> bool:
        """What the stream took of a batch; False when the tail is over (cut)."""
        if appended.admitted or appended.cut:
            self._streamed = True
        if appended.cut:
            self.cut = True
            with self._lock:
                self._pending.clear()
            return False
        return True

    def flush(self) -> None:
        """Send the buffered entries (the run watcher calls this while the run goes)."""
        with self._send_lock:
            while self._pending:
                if not self._send(self._take(BATCH_LINES)):
                    return

    def close_into(self, pipe, *, status: str) -> bool:
        """Queue the entries not sent yet and the end marker that tells followers the run is
        over on `pipe` (of the live-log Redis; sent after the final status is committed).
        False, queueing nothing, for a run that never wrote: a follower sees its final status
        in the database (and the stored log) on its next idle poll."""
        with self._send_lock:  # waits for a flush in progress: entries stay in order
            entries = [] if self.cut else self._take(len(self._pending))
        if not entries and not self._streamed:
            return False
        self.stream.close_into(pipe, entries, status=status)
        return True


def live_tails_close(closing: Iterable[tuple[LiveLogSink, str]]) -> None:
    """End the tails of runs whose final status is committed, (sink, status) each, in one
    round trip to the live-log Redis (none when no run wrote anything)."""
    pipe = live_logs_redis().pipeline(transaction=False)
    queued = [sink.close_into(pipe, status=status) for sink, status in closing]
    if not any(queued):
        return
    try:
        pipe.execute(raise_on_error=False)
    except Exception:  # the tail is best effort; the persisted log is the record
        logger.exception("could not end %s live log tails", sum(queued))


def live_tails_flush(sinks: Iterable[LiveLogSink]) -> None:
    """Send what the tails of the runs in progress hold, every run's in one round trip (the
    run watcher, every FLUSH_SECONDS; one each was a round trip per run and flush). A tail
    being sent or ended meanwhile (its send lock held) sends its own; one with more than
    BATCH_LINES waiting sends the rest on its own, in order."""
    taken: list[tuple[LiveLogSink, list[tuple[str, str]]]] = []
    locked: list[LiveLogSink] = []
    try:
        for sink in sinks:
            if sink.cut or not sink._pending or not sink._send_lock.acquire(blocking=False):
                continue
            locked.append(sink)
            if entries := sink._take(BATCH_LINES):
                taken.append((sink, entries))
        if not taken:
            return
        pipe = live_logs_redis().pipeline(transaction=False)
        for sink, entries in taken:
            sink.stream.append_into(pipe, entries)
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception:  # the tail is best effort; the persisted log is the record
            logger.exception("could not send %s live log tails", len(taken))
            return
        for (sink, _entries), reply in zip(taken, replies, strict=True):
            if isinstance(reply, Exception):
                logger.error("live log tail of %s failed: %s", sink.stream.key, reply)
            else:
                sink._appended(LiveLogStream.appended_from(reply))
    finally:
        for sink in locked:
            sink._send_lock.release()
    for sink, _entries in taken:
        if sink._pending and not sink.cut:
            sink.flush()
