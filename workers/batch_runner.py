"""Run a batch doorbell: many executions of one tenant and tier rung with one message.

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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.utils import timezone

from runs.finish import runs_finish
from scheduler_app.choices import Trigger
from scheduler_app.fleet import registry
from scheduler_app.redis_client import get_redis
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.services.claims import Claim, executions_claim, executions_give_back
from scheduler_app.services.executions import Ended
from scheduler_app.services.log_quota import stored_log
from scheduler_app.services.progress import execution_progress_save
from scheduler_app.services.quotas import (
    ClaimCount,
    quota_decide_counts,
    quota_defer,
    quota_running_count,
)
from workers.batch_lanes import Lanes, batch_width
from workers.due import wait_until_due
from workers.live_logs import live_tails_close
from workers.run_ledger import RunLedger
from workers.runner import Executed, execute_claimed, finish_claimed

logger = logging.getLogger(__name__)

# A batch still going after this many spill looks spills, however fast it moves.
SPILL_AFTER_LOOKS = 4

_ONE_BY_ONE = frozenset({Trigger.DAG, Trigger.RETRY})


@dataclass
class _Item:
    claim: Claim
    counted: ClaimCount
    stop_requested: bool


def execution_batch_run(
    *,
    execution_ids: Sequence[str],
    worker_id: str,
    tenant_id: str | None = None,
    queue: str | None = None,
) -> str:
    """Returns a summary for the worker's log, e.g. 'batch of 16: 15 success, 1 failed'."""
    config = settings.WORKER
    ledger = RunLedger(worker_id)
    writes = CoalescedWrites()
    claims = executions_claim(
        execution_ids=execution_ids,
        worker_id=worker_id,
        lease_seconds=config["LEASE_SECONDS"],
        metrics_pipe=writes,
    )
    # Every doorbell of the batch reached a worker, claimed or not (a duplicate delivery).
    ledger.doorbells_answered_into(
        writes,
        [str(execution_id) for execution_id in execution_ids],
        tenant_id=tenant_id,
        queue=queue,
    )
    items, room = _start(claims, writes, ledger=ledger)
    width = batch_width(
        [item.claim.task.handler_type for item in items],
        parallel=config["BATCH_PARALLEL"],
        room=room,
    )
    outcomes = _Batch(
        items, ledger=ledger, spill_seconds=config["BATCH_SPILL_SECONDS"], width=width
    ).run()
    counts = Counter(outcomes)
    if len(items) < len(claims):
        counts["deferred"] += len(claims) - len(items)
    if len(claims) < len(execution_ids):
        counts["duplicate"] += len(execution_ids) - len(claims)
    summary = ", ".join(f"{n} {what}" for what, n in counts.most_common())
    return f"batch of {len(execution_ids)}: {summary}"


def _start(
    claims: list[Claim], writes: CoalescedWrites, *, ledger: RunLedger
) -> tuple[list[_Item], int]:
    """The quota check and start-of-run bookkeeping of every claimed run, in one pipeline:
    the counters folded (`writes` holds the claims' lag observations and fairness releases
    already), the hour's run count once per tenant, a cancel check per run. Runs over quota
    are deferred as for a single doorbell; the rest are returned in batch order, with how
    many of them the tenants' concurrency quotas let run at once (at least 1)."""
    by_tenant: dict[object, list[Claim]] = {}
    for claim in claims:
        by_tenant.setdefault(claim.execution.tenant_id, []).append(claim)
    started = ledger.start(claims, get_redis().pipeline(transaction=False), writes=writes)
    now = started.at
    # The batch's runs are all `running` in the database but run one at a time: each is
    # judged as if the others of its tenant in this batch were not running. Run side by
    # side (`workers.batch_lanes`), no more of them run at once than the quota has room for.
    running = {
        tenant: quota_running_count(tenant_id=tenant) - (len(group) - 1)
        for tenant, group in by_tenant.items()
    }
    room = min(
        (
            max(1, group[0].execution.tenant.max_concurrent_runs - running[tenant] + 1)
            for tenant, group in by_tenant.items()
        ),
        default=1,
    )
    place = {claim.execution.id: k for group in by_tenant.values() for k, claim in enumerate(group)}
    items, deferred = [], []
    for index, claim in enumerate(claims):
        execution = claim.execution
        tenant = execution.tenant_id
        total, seconds = started.quota(tenant)
        runs_after = None
        if total is not None:
            runs_after = total - len(by_tenant[tenant]) + place[execution.id] + 1
        deferral = quota_decide_counts(
            tenant=execution.tenant,
            running=running[tenant],
            runs_after=runs_after,
            seconds=seconds,
            now=now,
        )
        if deferral is not None:
            logger.info("execution %s deferred: tenant over %s", execution.id, deferral.quota)
            deferred.append(claim)
            quota_defer(
                execution=execution,
                claim_token=claim.claim_token,
                deferral=deferral,
                counted=started.counted[tenant],
            )
            continue
        items.append(_Item(claim, started.counted[tenant], started.stop_requested(index)))
    if deferred and started.replies is not None:
        ledger.unstart(deferred, at=now)
    return items, room


@dataclass
class _Done:
    item: _Item
    executed: Executed
    started_at: datetime
    completed_at: datetime


class _Batch:
    """The run of a batch's items in order, `width` at a time (`workers.batch_lanes`; 1 is
    one after the other, inline), with the spill watcher (see the module doc)."""

    def __init__(
        self, items: list[_Item], *, ledger: RunLedger, spill_seconds: float, width: int = 1
    ) -> None:
        self.items = items
        self.ledger = ledger
        self.spill_seconds = spill_seconds
        self.lanes = Lanes(width)
        self.lock = threading.Lock()
        self.next = 0  # items[:next] have started
        self.spilled = False
        self.finished = False
        self.done = threading.Event()
        self.waiting: list[_Done] = []  # successes not yet recorded
        self.outcomes: list[str] = []

    def run(self) -> list[str]:
        if self.items:
            # Rung ahead of its time, a burst waits for it here, outside the spill watch.
            wait_until_due(min(item.claim.execution.scheduled_at for item in self.items))
        watcher = None
        if len(self.items) > 1:
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

    def _run_item(self, item: _Item) -> None:
        claim = item.claim
        try:
            executed = execute_claimed(claim, stop_requested=item.stop_requested)
        except BaseException:
            self.ledger.crashed()
            raise
        done = _Done(item, executed, executed.started_at, timezone.now())
        with self.lock:
            if not self.spilled and self._batchable(claim, executed):
                self.waiting.append(done)
                return
        status, accepted = finish_claimed(
            claim, executed, worker_id=self.ledger.worker_id, started_at=executed.started_at
        )
        with self.lock:
            self.outcomes.append(status if accepted else "rejected")

    @staticmethod
    def _batchable(claim: Claim, executed: Executed) -> bool:
        """Plain successes only: a DAG node moves its run on in its finish's transaction,
        and a retry's finish may close a chain of attempts; those go one by one."""
        return executed.outcome.succeeded and claim.execution.trigger not in _ONE_BY_ONE

    def _flush(self, waiting: list[_Done]) -> None:
        if not waiting:
            return
        writes = CoalescedWrites()
        logs = {
            done.item.claim.execution.id: stored_log(
                tenant=done.item.claim.execution.tenant,
                text=done.executed.sink.buffer.text(),
                truncated=done.executed.sink.buffer.truncated,
            )
            for done in waiting
        }
        reports = runs_finish(
            [
                Ended(
                    claim=done.item.claim,
                    outcome=done.executed.outcome,
                    started_at=done.started_at,
                    completed_at=done.completed_at,
                    log_text=logs[done.item.claim.execution.id][0],
                    log_truncated=logs[done.item.claim.execution.id][1],
                )
                for done in waiting
            ],
            metrics_pipe=writes,
        )
        accepted_ids = {
            done.item.claim.execution.id
            for done, report in zip(waiting, reports, strict=True)
            if report.accepted
        }
        for done in waiting:
            ok = done.item.claim.execution.id in accepted_ids
            if ok and done.executed.progress is not None:
                execution_progress_save(
                    execution=done.item.claim.execution, progress=done.executed.progress
                )
            self.ledger.end_into(
                writes,
                done.item.claim,
                errored=False,
                started_at=done.started_at,
                stored_log=logs[done.item.claim.execution.id][0] if ok else None,
            )
            self.outcomes.append("success" if ok else "rejected")
        try:
            pipe = get_redis().pipeline(transaction=False)
            writes.send_into(pipe)
            pipe.execute(raise_on_error=False)
        except Exception:
            logger.exception("could not record the end of a batch of %s runs", len(waiting))
        live_tails_close(
            (
                done.executed.sink,
                "success" if done.item.claim.execution.id in accepted_ids else "rejected",
            )
            for done in waiting
        )

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

    def _spill(self, waiting: list[_Done], unstarted: list[_Item]) -> None:
        """Flush the waiting successes, give back what has not started (in the watcher)."""
        try:
            self._flush(waiting)
            self._give_back(unstarted)
        except Exception:
            logger.exception("batch spill failed; the runs it held are reaped at lease expiry")
        finally:
            connection.close()  # this thread's own database connection

    def _give_back(self, items: Sequence[_Item]) -> None:
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


__all__ = ["execution_batch_run"]
