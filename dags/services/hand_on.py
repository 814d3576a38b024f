"""What a finishing DAG node hands on to the process that finished it: one ready successor it
runs itself, right after the finish commits, instead of ringing its doorbell and waiting for
the broker to hand it to some pool process (the broker round trip, the worker's consumer
loop and the hand-over to a child are most of a chain's inter-node latency).

The worker makes a `HandOn` for the message it runs and passes it down its finish (explicitly,
through `runs.finish` into the engine: no thread-local); the engine offers it at most one
node per finished run, and the worker takes what it was handed once the finish returned.

How it stays safe:
* Only a worker makes one, so the reaper, the API or the beat never hand anything on.
* At most one node per finished run, of the tier the worker took the run from, while the
  time budget lasts (DAG_CONTINUATION_SECONDS from the first run the message brought, so
  one chain does not hold a pool process for ever while other work waits in the broker);
  every other ready node rings its doorbell.
* The kept execution is an ordinary `queued` row written in the finishing transaction,
  under the finishing worker's id; the hand-on learns its id only once that transaction
  commits (a rollback hands nothing on). The worker then claims it with the usual
  compare-and-swap, so it runs once, with a lease, cancel watcher and quotas like any run.
  If the worker dies between the commit and the claim, the dead-worker reaper rings it
  for the fleet (`worker_kept_runs_ring`), or the beat's reconciler republishes it after
  SCHEDULER_REQUEUE_GRACE. A worker killed while running it leaves a running row with a
  lease: the reaper fails it as `worker_lost` and retries it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction


@dataclass
class HandOn:
    """`worker_id`: the worker finishing the node (its successors prefer it: sticky
    routing). `tier`: the queue it took its run from; None hands nothing on (sticky hints
    only)."""

    worker_id: str = ""
    tier: str | None = None
    deadline: float = 0.0
    _offered: bool = False
    _kept: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_worker(cls, *, worker_id: str, tier: str | None) -> HandOn:
        """A worker's, for one message; it hands nothing on where the budget is 0."""
        budget = settings.DAG_CONTINUATION_SECONDS
        if not tier or budget <= 0:
            return cls(worker_id=worker_id)
        return cls(worker_id=worker_id, tier=tier, deadline=time.monotonic() + budget)

    def offer(self, *, queue: str) -> bool:
        """May the node about to be dispatched (an execution of tier `queue`) be run by this
        process right after the current transaction commits? True at most once per
        finished run (a batch's lanes share one hand-on: the first to ask is kept)."""
        if self.tier is None or queue != self.tier or time.monotonic() > self.deadline:
            return False
        with self._lock:
            if self._offered or self._kept:
                return False
            self._offered = True
            return True

    def accept(self, execution_id: str) -> None:
        """The offered node's row is written in this transaction: hand it on once the
        transaction commits."""
        transaction.on_commit(lambda: self._kept.append(execution_id))

    def take(self) -> str | None:
        """The id of the node to run now, or None; the next finished run may be offered
        one again."""
        with self._lock:
            self._offered = False
            return self._kept.pop(0) if self._kept else None
