"""Publishing a tick's batches on a background thread while the next batch is recorded.

A due batch costs one INSERT (PostgreSQL) and one pipelined LPUSH (Redis); done in turn,
each waits for the other. With one publisher thread, batch k goes to the broker while
batch k+1 is being written, and both sockets release the GIL while they wait.

Nothing changes for correctness: a batch is rung only after its rows committed (it is
submitted after `fires_record` returns), and `drain()` waits for every batch before the
tick ends, re-raising the first failure the way an inline ring would. A process that
dies between commit and publish leaves queued rows the next leader re-rings
(`takeover_queued_republish`), exactly as before.

The thread rings with `ring_deferring_hold_back`: fair dispatch decides in Redis, and the
rows it held back are put back to `pending` by `drain()`, on the engine's own database
connection, before the tick goes on to promote due pending rows. The thread's only database
use left is reading the names of tasks it has not cached (`dispatch.with_task_names`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections

from scheduler_app.fleet.records import live_processes
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import Rung, doorbells_hold_back, ring_deferring_hold_back

logger = logging.getLogger(__name__)

# How often the beat looks up the fleet's size, which decides how a burst is cut up.
FLEET_LOOKUP_SECONDS = 5.0


def _ring_fires(bells: Sequence[Doorbell], processes: int | None) -> Rung:
    close_old_connections()  # this thread's own connection, for task names not cached yet
    # First attempts never have a previous worker: no sticky lookup.
    return ring_deferring_hold_back(
        bells, sticky=False, batch=doorbell_batch(), processes=processes
    )


def doorbell_batch() -> int:
    return settings.SCHEDULER["DOORBELL_BATCH"]


class FirePublisher:
    """One per engine: publishes each batch's doorbells on a thread of its own while the
    engine goes on to the next batch."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[Rung]] = []
        self._processes: int | None = None
        self._processes_looked_at = float("-inf")

    def submit(self, bells: Sequence[Doorbell]) -> None:
        processes = self.fleet_processes()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fire-publish")
        self._pending.append(self._executor.submit(_ring_fires, list(bells), processes))

    def fleet_processes(self) -> int | None:
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
        """Wait for every submitted batch and put the rows fair dispatch held back to
        `pending` (one UPDATE, on the caller's connection); returns how many doorbells went
        out."""
        pending, self._pending = self._pending, []
        sent = 0
        held_back: list[Doorbell] = []
        failure: BaseException | None = None
        for future in pending:
            try:
                rung = future.result()
            except Exception as error:  # the other batches still count; the first error wins
                failure = failure or error
            else:
                sent += rung.sent
                held_back.extend(rung.held_back)
        doorbells_hold_back(held_back)
        if failure is not None:
            raise failure
        return sent

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
