"""One watcher thread per worker process looks after every run in progress there: it polls
for a stop request (cancel, or the claim abandoned by a draining worker), renews the lease,
and flushes the live log tail. A run costs a registration, not three threads of its own.

* Stop requests: every CANCEL_POLL_SECONDS, one pipelined EXISTS for all runs; a hit sets
  the run's cancel event (the handlers watch it). The runner checks once before the handler
  starts, in the pipeline of its other start-of-run writes, so a run cancelled while it was
  queued never starts its handler.
* Lease: renewed every lease/3. Renewal stops `give_up_after` seconds into the run (a handler
  that ignored its timeout): the lease then expires and the reaper takes the attempt over. If
  the claim is lost (the reaper already failed this attempt), the run's cancel event is set,
  so a zombie never keeps working on an attempt it no longer owns.
* Preemption: in the same pipeline, whether the run's worker is being preempted (draining
  with its preempt grace running, `workers.fleet_membership`); a hit sets the run's
  `preempted` event (`context.preempted`).
* Checkpoint file: at each renewal, a shell run's checkpoint file is saved when it changed
  (`workers.checkpoints`), so a SIGKILLed worker leaves the state of its last renewal.
* Live log: buffered lines go out every FLUSH_SECONDS (see `workers.live_logs`), and so
  does the latest progress report, when it changed (`workers.progress`).

The thread starts with the first run of a process (after the pool's fork); a round with
nothing due costs it a look at an empty set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections

from scheduler_app.redis_client import get_redis
from scheduler_app.services.claims import execution_renew_lease
from workers.checkpoints import RunCheckpoints
from workers.control import preempted_into, stop_requested_into
from workers.live_logs import FLUSH_SECONDS, LiveLogSink, live_tails_flush
from workers.progress import ProgressReporter

logger = logging.getLogger(__name__)

# The thread looks at its runs at least this often (it is never woken up: a run registered
# just after a round waits this long at most for its first log flush).
IDLE_WAKE_SECONDS = FLUSH_SECONDS
# A renewal that failed (the database away) is tried again this soon.
RENEW_RETRY_SECONDS = 1.0


@dataclass(eq=False)
class WatchedRun:
    execution_id: str
    claim_token: uuid.UUID
    cancel_event: threading.Event
    lease_seconds: float
    give_up_after: float
    sink: LiveLogSink | None = None
    progress: ProgressReporter | None = None
    worker_id: str = ""
    preempted: threading.Event | None = None
    checkpoints: RunCheckpoints | None = None
    started: float = field(default_factory=time.monotonic)
    next_poll: float = 0.0
    next_renew: float = 0.0
    renewing: bool = True

    @property
    def renew_interval(self) -> float:
        return max(0.2, self.lease_seconds / 3)


class RunWatcher:
    def __init__(self) -> None:
        self._runs: set[WatchedRun] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="run-watcher", daemon=True)
        self._thread.start()

    def watch(self, run: WatchedRun) -> None:
        """Nothing is due for a new run before the next round (see IDLE_WAKE_SECONDS), so the
        thread is not woken: a short run never has to hand the GIL over to it."""
        now = time.monotonic()
        run.next_poll = now + settings.FLEET["CANCEL_POLL_SECONDS"]
        run.next_renew = now + run.renew_interval
        with self._lock:
            self._runs.add(run)

    def unwatch(self, run: WatchedRun) -> None:
        with self._lock:
            self._runs.discard(run)

    # -- the thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        next_flush = 0.0
        while True:
            with self._lock:
                runs = list(self._runs)
            if not runs:
                time.sleep(IDLE_WAKE_SECONDS)
                continue
            now = time.monotonic()
            try:
                self._poll_stops([run for run in runs if run.next_poll <= now], now)
                if now >= next_flush:
                    next_flush = now + FLUSH_SECONDS
                    for run in runs:
                        # Progress first: its tail entry goes out with the lines.
                        if run.progress is not None:
                            run.progress.flush()
                    live_tails_flush(run.sink for run in runs if run.sink is not None)
                self._renew([run for run in runs if run.renewing and run.next_renew <= now], now)
            except Exception:  # the watcher must outlive any blip
                logger.exception("run watcher round failed")
            wake = min(
                [next_flush]
                + [run.next_poll for run in runs]
                + [run.next_renew for run in runs if run.renewing]
            )
            time.sleep(min(IDLE_WAKE_SECONDS, max(0.01, wake - time.monotonic())))

    def _poll_stops(self, runs: list[WatchedRun], now: float) -> None:
        runs = [run for run in runs if not run.cancel_event.is_set()]
        if not runs:
            return
        interval = settings.FLEET["CANCEL_POLL_SECONDS"]
        for run in runs:
            run.next_poll = now + interval
        asking = [
            run
            for run in runs
            if run.worker_id and run.preempted is not None and not run.preempted.is_set()
        ]
        workers = sorted({run.worker_id for run in asking})
        try:
            pipe = get_redis().pipeline(transaction=False)
            for run in runs:
                stop_requested_into(
                    pipe, execution_id=run.execution_id, claim_token=str(run.claim_token)
                )
            for worker_id in workers:
                preempted_into(pipe, worker_id=worker_id)
            replies = pipe.execute()
        except Exception:  # Redis blip: the next poll tries again
            logger.exception("cancel poll failed")
            return
        for run, stop in zip(runs, replies[: len(runs)], strict=True):
            if stop:
                logger.info("execution %s: cancel requested", run.execution_id)
                run.cancel_event.set()
        preempted = {w for w, hit in zip(workers, replies[len(runs) :], strict=True) if hit}
        for run in asking:
            if run.worker_id in preempted and run.preempted is not None:
                logger.info("execution %s: the worker is being preempted", run.execution_id)
                run.preempted.set()

    def _renew(self, runs: list[WatchedRun], now: float) -> None:
        if not runs:
            return
        close_old_connections()
        for run in runs:
            run.next_renew = now + run.renew_interval
            if now - run.started > run.give_up_after:
                logger.warning(
                    "execution %s overran its timeout; lease left to expire", run.execution_id
                )
                run.renewing = False
                continue
            try:
                renewed = execution_renew_lease(
                    execution_id=run.execution_id,
                    claim_token=run.claim_token,
                    lease_seconds=run.lease_seconds,
                )
            except Exception:  # a database blip: try again soon
                logger.exception("lease renewal of %s failed", run.execution_id)
                # Not a whole interval later: a primary being replaced by its standby is back
                # within seconds, and the lease must not run out meanwhile (the reaper would
                # hand a run still running to another attempt).
                run.next_renew = now + min(RENEW_RETRY_SECONDS, run.renew_interval)
                continue
            if not renewed and run in self._runs:
                logger.warning("execution %s: claim lost, stopping the run", run.execution_id)
                run.renewing = False
                run.cancel_event.set()
            elif renewed and run.checkpoints is not None:
                try:
                    run.checkpoints.renewal_save()
                except Exception:  # a database blip: the attempt's end saves it anyway
                    logger.exception("checkpoint file of %s not saved", run.execution_id)


_watchers: dict[int, RunWatcher] = {}
_lock = threading.Lock()


def run_watcher() -> RunWatcher:
    """This process's watcher (a forked pool process starts its own)."""
    pid = os.getpid()
    watcher = _watchers.get(pid)
    if watcher is None:
        with _lock:
            watcher = _watchers.get(pid)
            if watcher is None:
                watcher = _watchers[pid] = RunWatcher()
    return watcher
