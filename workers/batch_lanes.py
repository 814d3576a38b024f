"""Lanes: run a batch's handlers side by side when they only wait (on a sandbox, a webhook).

A shell run spends most of its wall time asleep: bwrap waits in the kernel while its
namespaces are set up and torn down (about 14 ms of wall time for 2-3 ms of CPU), and a
webhook waits on the network. Run strictly one after the other, a batch of such runs is
as slow as the sum of those sleeps, which is what held a worker to a fraction of its CPU.
So a batch whose every run has such a handler runs up to `width` of them at once, each in
a thread of its own; anything else (python handlers run in this process and hold the GIL,
others may not be thread-safe) keeps width 1, which runs inline, exactly as before.

Only the running of one item is concurrent; which item starts next, what counts as started
and when to stop starting is decided by the caller under its own lock (see
`workers.batch.Batch`). A lane is taken *before* an item is marked started, so an
item waiting for a lane is still unstarted and a spill hands it back.

Each thread closes its own database connections when its item is done (Django's are per
thread); an exception raised through an item (a handler's outcome never raises, a lost
database might) is kept and raised again by `join`, after every lane has finished.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections

# Handler types that spend their time waiting on another process or the network.
PARALLEL_HANDLER_TYPES = frozenset({"shell", "http"})


class Lanes:
    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self._free = threading.Semaphore(self.width)
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()

    def acquire(self) -> None:
        """Wait for a free lane (at once with width 1: the previous item ran inline)."""
        self._free.acquire()

    def release(self) -> None:
        """Give back a lane taken with `acquire` and not used."""
        self._free.release()

    @property
    def failed(self) -> bool:
        return self._error is not None

    def start(self, run: Callable[[], None]) -> None:
        """Run `run` in the lane taken with `acquire`: inline with width 1, else in a thread."""
        if self.width == 1:
            try:
                run()
            finally:
                self._free.release()
            return
        thread = threading.Thread(target=self._lane, args=(run,), name="batch-lane", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _lane(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as error:
            with self._error_lock:
                if self._error is None:
                    self._error = error
        finally:
            connections.close_all()  # this thread's own connections
            self._free.release()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads = []
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def batch_width(handler_types: list[str], *, parallel: int, room: int) -> int:
    """How many of a batch's runs may run at once: `parallel` (WORKER_BATCH_PARALLEL) when
    every run's handler only waits, never more than the batch has runs nor than the
    tenant's concurrency quota has room for (`room`), else 1."""
    if not handler_types or any(kind not in PARALLEL_HANDLER_TYPES for kind in handler_types):
        return 1
    return max(1, min(parallel, len(handler_types), room))
