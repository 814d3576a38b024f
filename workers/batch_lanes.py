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

The lanes are threads the process keeps (`_LanePool`, started on first use, after the
pool's fork): a thread started per run cost more of the worker's CPU than the sandbox's
Python side. Each closes its database connections when its item is done (Django's are per
thread), as a thread of its own did; an exception raised through an item (a handler's
outcome never raises, a lost database might) is kept and raised again by `join`, after
every lane has finished.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable

from django.db import connections

# Handler types that spend their time waiting on another process or the network.
PARALLEL_HANDLER_TYPES = frozenset({"shell", "http"})


class _LanePool:
    """Daemon threads that run the lanes' items, kept for the process's life: a job goes to
    a free thread, or to a new one when none is free, so as many items run at once as
    before, each in a thread of its own; a free thread waits on the queue. Daemon, as a
    lane's own thread was: a handler stuck past its timeout must not hold the worker's
    exit."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._free = 0  # threads neither running a job nor promised one
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._free == 0:
                self._free += 1
                threading.Thread(target=self._serve, name="batch-lane", daemon=True).start()
            self._free -= 1  # promised to this job
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            # In an empty context, as a new thread starts with: nothing an item left in its
            # context variables (a trace's span, say) reaches the next.
            contextvars.Context().run(job)
            with self._lock:
                self._free += 1


_pool: _LanePool | None = None
_pool_lock = threading.Lock()


def _lane_pool() -> _LanePool:
    """This process's lane threads (a forked child starts its own: threads do not fork)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _LanePool()
        return _pool


class Lanes:
    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self._free = threading.Semaphore(self.width)
        self._running = 0  # items started in a lane and not finished
        self._idle = threading.Condition()
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
        with self._idle:
            self._running += 1
        _lane_pool().run(lambda: self._lane(run))

    def _lane(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as error:
            with self._error_lock:
                if self._error is None:
                    self._error = error
        finally:
            try:
                connections.close_all()  # this thread's own connections
            finally:
                self._free.release()
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

    def join(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._running == 0)
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
