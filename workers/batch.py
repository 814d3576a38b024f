"""A batch's runs in this process (a single doorbell is a batch of one).

One statement claims them all, one Redis pipeline does their start bookkeeping, their
handlers run in batch order in this process, and the ones that succeed are finished
together with one statement and one pipeline (a failure, a retry or a DAG node is finished
on its own at once, through the same path as a single doorbell). That is what a burst of
short scheduled runs needs: Celery's per-message cost and the per-run round trips are paid
once per batch. Handlers run one after the other, except in a batch whose every handler
only waits (shell, http): up to WORKER_BATCH_PARALLEL of those run at once, in lanes
(`workers.batch_lanes`), never more than the tenant's concurrency quota has room for.

A batch must not hold runs back behind a slow handler, nor hold them or a finished run's
result back for long. A watcher thread looks every `SPILL_SECONDS` (0.25 s): when no run
has started for a whole look (one after the other: one handler has been running that long;
in lanes: every lane has been held that long), or the batch has run for
`SPILL_AFTER_LOOKS` looks (1 s), it spills: it records the successes waiting to be
flushed, and gives back every run the batch has not started (running -> queued, the start
bookkeeping undone) and rings their doorbells again for any free worker, cut as the beat
cuts a burst (one share per live worker process; under two per process, one each). From
then on the batch only finishes the runs it is in, one by one. A batch of quick handlers
that keeps moving is left alone: handing its runs to other processes that are just as busy
would only add work.

If the process dies, the rows it holds are `running` with a lease like any claimed run:
the reaper fails and retries them when the lease expires, and a run given back but not yet
re-rung is re-rung by the beat's stale-queued sweep.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.utils import timezone

from dags.engine.dispatch import HandOn
from scheduler_app.choices import Trigger
from scheduler_app.fleet import registry
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.claims import Claim, executions_give_back
from scheduler_app.services.quotas import ClaimCount
from workers.batch_lanes import Lanes
from workers.due import wait_until_due
from workers.execute import Executed, execute_claimed
from workers.finishing import Done, finish_claimed, successes_finish
from workers.run_ledger import RunLedger
from workers.run_traces import RunTrace

logger = logging.getLogger(__name__)

# A batch still going after this many spill looks spills, however fast it moves.
SPILL_AFTER_LOOKS = 4

_ONE_BY_ONE = frozenset({Trigger.DAG, Trigger.RETRY})


@dataclass
class Item:
    """A claimed run the batch may start, with its quota count and whether a stop was
    asked for it before it started."""

    claim: Claim
    counted: ClaimCount
    stop_requested: bool
    trace: RunTrace | None = None  # where its spans go, while tracing is on


class Batch:
    """The run of a batch's items in order, `width` at a time (`workers.batch_lanes`; 1 is
    one after the other, inline), with the spill watcher (see the module doc)."""

    def __init__(
        self,
        items: list[Item],
        *,
        ledger: RunLedger,
        spill_seconds: float,
        width: int = 1,
        hand_on: HandOn | None = None,
    ) -> None:
        self.items = items
        self.hand_on = hand_on
        self.ledger = ledger
        self.spill_seconds = spill_seconds
        self.lanes = Lanes(width)
        self.lock = threading.Lock()
        self.next = 0  # items[:next] have started
        self.spilled = False
        self.finished = False
        self.done = threading.Event()
        self.waiting: list[Done] = []  # successes not yet recorded
        self.outcomes: list[str] = []

    def run(self) -> list[str]:
        watcher = None
        if len(self.items) > 1:
            # Rung ahead of its time, a burst waits for it here, outside the spill watch (a
            # batch of one waits in its run watch, where a cancel ends the wait).
            wait_until_due(min(item.claim.execution.scheduled_at for item in self.items))
            watcher = threading.Thread(target=self._watch, name="batch-spill", daemon=True)
            watcher.start()
        try:
            try:
                for index, item in enumerate(self.items):
                    self.lanes.acquire()  # before it counts as started: a spill may take it
                    with self.lock:
                        if self.spilled or self.lanes.failed:
                            self.lanes.release()
                            break
                        self.next = index + 1
                    self.lanes.start(lambda item=item: self._run_item(item))
            finally:
                self.lanes.join()  # raises what an item raised through, once all are done
        finally:
            with self.lock:
                self.finished = True
                waiting, self.waiting = self.waiting, []
                unstarted = [] if self.spilled else self.items[self.next :]
            if watcher is not None:
                self.done.set()
                watcher.join()  # a spill under way ends before the batch reports
            self._flush(waiting)
            if unstarted:  # only when a handler raised through: hand the rest back
                self._give_back(unstarted)
        return self.outcomes

    def _run_item(self, item: Item) -> None:
        claim = item.claim
        try:
            executed = execute_claimed(
                claim, stop_requested=item.stop_requested, run_trace=item.trace
            )
        except BaseException:
            self.ledger.crashed()
            raise
        done = Done(claim, executed, executed.started_at, timezone.now(), item.trace)
        with self.lock:
            if not self.spilled and self._batchable(claim, executed):
                self.waiting.append(done)
                return
        status, accepted = finish_claimed(
            claim,
            executed,
            worker_id=self.ledger.worker_id,
            started_at=executed.started_at,
            hand_on=self.hand_on,
            run_trace=item.trace,
        )
        with self.lock:
            self.outcomes.append(status if accepted else "rejected")

    @staticmethod
    def _batchable(claim: Claim, executed: Executed) -> bool:
        """Plain successes only: a DAG node moves its run on in its finish's transaction,
        and a retry's finish may close a chain of attempts; those go one by one."""
        return executed.outcome.succeeded and claim.execution.trigger not in _ONE_BY_ONE

    def _flush(self, waiting: list[Done]) -> None:
        self.outcomes.extend(successes_finish(waiting, ledger=self.ledger))

    def _watch(self) -> None:
        """The watcher thread: spill when no run has started for a whole look (one after
        the other: one handler ran that long; in lanes: every lane was held that long), or
        the batch has run SPILL_AFTER_LOOKS of them."""
        seen, looks = -1, 0
        while not self.done.wait(self.spill_seconds):
            looks += 1
            with self.lock:
                if self.finished:
                    return
                moving = self.next != seen
                seen = self.next
                if moving and looks < SPILL_AFTER_LOOKS:
                    continue
                self.spilled = True
                waiting, self.waiting = self.waiting, []
                unstarted = self.items[self.next :]
            self._spill(waiting, unstarted)
            return

    def _spill(self, waiting: list[Done], unstarted: list[Item]) -> None:
        """Flush the waiting successes, give back what has not started (in the watcher)."""
        try:
            self._flush(waiting)
            self._give_back(unstarted)
        except Exception:
            logger.exception("batch spill failed; the runs it held are reaped at lease expiry")
        finally:
            connection.close()  # this thread's own database connection

    def _give_back(self, items: Sequence[Item]) -> None:
        if not items:
            return
        given = executions_give_back([item.claim for item in items])
        given_ids = {execution.id for execution in given}
        back = [item for item in items if item.claim.execution.id in given_ids]
        self.ledger.unstart(
            [item.claim for item in back],
            at=timezone.now(),
            counted=[item.counted for item in back],
        )
        ring(
            [
                Doorbell(
                    execution_id=str(execution.id),
                    tenant_id=str(execution.tenant_id),
                    queue=execution.queue,
                    traceparent=execution.traceparent,
                )
                for execution in given
            ],
            sticky=False,
            # Cut as the beat cuts a burst: one share per live worker process (under two per
            # process, one each), so an overloaded fleet keeps the batches' lower cost per run
            # instead of turning every run handed back into a message of its own.
            batch=settings.SCHEDULER["DOORBELL_BATCH"],
            processes=_fleet_processes(),
        )
        logger.info("batch handed back %s runs it had not started", len(given))


def _fleet_processes() -> int | None:
    try:
        return registry.live_processes() or None
    except Exception:
        logger.exception("could not read the fleet's size; hand-back cut the default way")
        return None
