"""Progress reports from a running handler.

* shell: a stdout line `::progress <percent> [message]` is a report, not a log line
  (`workers.handlers.progress_lines`).
* python: a function that declares a `progress` parameter is given a callable
  `progress(percent, message="")` (also `context.progress`).
* http: a request has no way to report progress.

The reporter only keeps the latest value in memory; the process's run watcher sends it to
Redis with the live log (at most one write per flush period, whatever the task reports), so
reporting costs a task nothing. The runner stores the last value with the execution.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from handler_contract.base import SecretMasker
from scheduler_app.progress import LIVE_TTL_SECONDS, progress_key
from scheduler_app.redis_client import get_redis
from workers.handlers.progress_lines import progress_value
from workers.live_logs import LiveLogSink

logger = logging.getLogger(__name__)


class ProgressReporter:
    """The `progress(percent, message)` a handler is given; thread-safe."""

    def __init__(
        self, *, execution_id: str, secrets: Iterable[str] = (), live: LiveLogSink | None = None
    ) -> None:
        self._key = progress_key(execution_id)
        # The live log tail: SSE followers get a `progress` event in line with the log (sent
        # with the tail's next flush, under its budget).
        self._live = live
        self._masker = SecretMasker(secrets)
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None
        self._dirty = False

    def __call__(self, percent: float, message: str = "") -> None:
        percent, message = progress_value(percent, message)
        latest = {
            "percent": percent,
            "message": self._masker.text(message),
            "updated_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
        with self._lock:
            self._latest = latest
            self._dirty = True

    @property
    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._latest) if self._latest else None

    def flush(self) -> None:
        """Send the latest value if it changed since the last flush (the run watcher)."""
        with self._lock:
            if not self._dirty or self._latest is None:
                return
            payload = json.dumps(self._latest)
            self._dirty = False
        if self._live is not None:
            self._live.progress(payload)
        try:
            get_redis().set(self._key, payload, ex=LIVE_TTL_SECONDS)
        except Exception:  # best effort: the stored value at the end is the record
            logger.exception("could not send the progress of %s", self._key)
