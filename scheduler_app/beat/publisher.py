"""Publishing a tick's batches on a background thread while the next batch is recorded.

A due batch costs one INSERT (PostgreSQL) and one pipelined LPUSH (Redis); done in turn,
each waits for the other. With one publisher thread, batch k goes to the broker while
batch k+1 is being written, and both sockets release the GIL while they wait.

Nothing changes for correctness: a batch is published only after its rows committed (it is
submitted after `fires_record` returns), and `drain()` waits for every batch before the
tick ends, re-raising the first failure the way an inline publish would. A process that
dies between commit and publish leaves queued rows the next leader re-rings
(`takeover_queued_republish`), exactly as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections

from scheduler_app.dispatch import Doorbell, publish
from workers.registry import live_processes

logger = logging.getLogger(__name__)

# How often the beat looks up the fleet's size, which decides how a burst is cut up.
FLEET_LOOKUP_SECONDS = 5.0


def _publish_fires(bells: Sequence[Doorbell], processes: int | None) -> int:
    close_old_connections()  # this thread's own connection (fair dispatch may hold rows back)
    return publish(bells, sticky=False, batch=doorbell_batch(), processes=processes)


def doorbell_batch() -> int:
    return settings.SCHEDULER["DOORBELL_BATCH"]


class FirePublisher:
    """One per engine: publishes each batch's doorbells on a thread of its own while the
    engine goes on to the next batch."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[int]] = []
        self._processes: int | None = None
        self._processes_looked_at = float("-inf")

    def submit(self, bells: Sequence[Doorbell]) -> None:
        processes = self._fleet_processes()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fire-publish")
        self._pending.append(self._executor.submit(_publish_fires, list(bells), processes))

    def _fleet_processes(self) -> int | None:
        """The fleet's live concurrency, looked up at most every FLEET_LOOKUP_SECONDS; None
        (cut bursts the default way) when no worker has registered or Redis did not say."""
        if time.monotonic() - self._processes_looked_at >= FLEET_LOOKUP_SECONDS:
            self._processes_looked_at = time.monotonic()
            try:
                self._processes = live_processes() or None
            except Exception:
                logger.exception("could not read the fleet's size; bursts cut the default way")
                self._processes = None
        return self._processes

    def drain(self) -> int:
        """Wait for every submitted batch; returns how many doorbells went out."""
        pending, self._pending = self._pending, []
        sent = 0
        failure: BaseException | None = None
        for future in pending:
            try:
                sent += future.result()
            except Exception as error:  # the other batches still count; the first error wins
                failure = failure or error
        if failure is not None:
            raise failure
        return sent

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
