"""A worker's per-run Redis bookkeeping: what a run's start writes, how a start is undone,
and what its end writes. The runner (`workers.runner`, a single doorbell being a batch of
one) keeps its books here, so each step exists once.

What is kept: the tenant's in-flight doorbells and the tier's drain rate (fairness), the
tenant's hourly run count and monthly compute seconds (quotas), the worker's active, done and
error counts (the fleet), the started executions the retry budget is a ratio of, the bytes of
stored logs, and the schedule-to-start of a run claimed ahead of its
time. They are counters for operators, fairness and budgets, not the record (PostgreSQL is):
a Redis blip must not fail a run, so a failed round trip is logged and the run goes on.

The hot path is kept to the round trips it had: a run's start is one pipeline (with its
claim's lag observation and the replies the start needs: the quota counts and a stop check);
a batch's starts are one for all its runs (the counters folded by `CoalescedWrites`); a run's
end is queued on the pipeline its finish filled and sent by the caller after the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduler_app.fleet import registry
from scheduler_app.monitoring.counters import record_run_started_into
from scheduler_app.redis_client import get_redis
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.ringing.fairness import fair_release, fair_release_into
from scheduler_app.services.claims import Claim
from scheduler_app.services.log_quota import log_bytes_count_into
from scheduler_app.services.quotas import (
    ClaimCount,
    compute_seconds_add_into,
    quota_count_runs_into,
    quota_replies,
    quota_uncount_run_into,
)
from scheduler_app.services.retry_budget import (
    retry_budget_note_execution_into,
    retry_budget_unnote_execution_into,
)
from workers.control import stop_requested_into

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Started:
    """The start of some claimed runs, counted: what Redis answered (None when it did not)."""

    at: datetime
    counted: dict[object, ClaimCount]  # tenant id -> where its quota counts sit in the replies
    replies: list[Any] | None
    stop_indexes: list[int]  # per run, in the order started: where its stop check sits

    def stop_requested(self, index: int) -> bool:
        """Was the `index`-th run cancelled (or its claim abandoned) while it was queued?"""
        if self.replies is None:
            return False
        reply = self.replies[self.stop_indexes[index]]
        return not isinstance(reply, Exception) and bool(reply)

    def quota(self, tenant_id: object) -> tuple[int | None, float | None]:
        """The tenant's hourly run count after these runs, and its month's compute seconds
        (None for what Redis did not answer)."""
        return quota_replies(self.counted[tenant_id], self.replies)


class RunLedger:
    """The bookkeeping of the runs one worker process starts and ends."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    # -- the doorbell -----------------------------------------------------------------------
    @staticmethod
    def doorbells_answered_into(
        pipe: Any, execution_ids: Iterable[str], *, tenant_id: str | None, queue: str | None
    ) -> None:
        """Doorbells that reached this worker, claimed or not (a duplicate delivery): they no
        longer wait in the broker, and count towards the tier's drain rate."""
        for execution_id in execution_ids:
            fair_release_into(pipe, execution_id=execution_id, tenant_id=tenant_id, queue=queue)

    @staticmethod
    def doorbell_answered(*, execution_id: str, tenant_id: str | None, queue: str | None) -> None:
        """`doorbells_answered_into` in a round trip of its own (a doorbell whose run was not
        claimed: nothing else to send)."""
        fair_release(execution_id=execution_id, tenant_id=tenant_id, queue=queue)

    # -- start, and its undo ----------------------------------------------------------------
    def start(
        self, claims: Sequence[Claim], pipe: Any, *, writes: CoalescedWrites | None = None
    ) -> Started:
        """Count the start of claimed runs and send `pipe` (one round trip): per tenant, its
        runs in the hour (one INCRBY: of two racing claims one sees the other) and a read of
        its month's compute seconds; per run, the worker's active count, the retry budget's
        started executions and a stop check. `writes`: where the counters nobody reads go (a
        batch's `CoalescedWrites`, folded onto `pipe` before it is sent); else `pipe`."""
        now = timezone.now()
        counters = pipe if writes is None else writes
        runs: dict[object, int] = {}
        for claim in claims:
            runs[claim.execution.tenant_id] = runs.get(claim.execution.tenant_id, 0) + 1
        counted = {
            tenant: quota_count_runs_into(pipe, tenant_id=tenant, runs=count, now=now)
            for tenant, count in runs.items()
        }
        stop_indexes = []
        for claim in claims:
            registry.run_started_into(counters, self.worker_id)
            retry_budget_note_execution_into(counters, at=now)
            stop_indexes.append(
                stop_requested_into(
                    pipe, execution_id=str(claim.execution.id), claim_token=str(claim.claim_token)
                )
            )
        if writes is not None:
            writes.send_into(pipe)
        replies = None
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception:
            logger.exception("could not count the start of %s runs", len(claims))
        return Started(at=now, counted=counted, replies=replies, stop_indexes=stop_indexes)

    def unstart(
        self,
        claims: Sequence[Claim],
        *,
        at: datetime,
        counted: Sequence[ClaimCount] | None = None,
    ) -> None:
        """Undo the start of claimed runs that did not run (deferred, handed back), in one
        round trip. `counted`: also uncount them in their tenant's hourly runs (a hand-back
        and a quota deferral, `workers.runner`)."""
        try:
            pipe = get_redis().pipeline(transaction=False)
            for index, claim in enumerate(claims):
                registry.run_not_started_into(pipe, self.worker_id)
                retry_budget_unnote_execution_into(pipe, at=at)
                if counted is not None:
                    quota_uncount_run_into(
                        pipe, tenant_id=claim.execution.tenant_id, counted=counted[index]
                    )
            pipe.execute()
        except Exception:
            logger.exception("could not uncount %s unstarted runs", len(claims))

    # -- end ---------------------------------------------------------------------------------
    def end_into(
        self,
        pipe: Any,
        claim: Claim,
        *,
        errored: bool,
        started_at: datetime | None = None,
        stored_log: str | None = None,
    ) -> None:
        """Queue the end-of-run writes on `pipe` (which holds the counters the finish
        queued): the bytes of the log the finish stored (`stored_log`, when it was accepted),
        the worker's counters, the tenant's
        compute seconds (from `started_at`, the handler's start, else the claim's), and the
        schedule-to-start of a run claimed ahead of its time (the claim observes the others).
        The caller sends `pipe` after the finish committed."""
        execution, now = claim.execution, timezone.now()
        if stored_log is not None:
            log_bytes_count_into(pipe, tenant_id=execution.tenant_id, text=stored_log)
        registry.run_ended_into(pipe, self.worker_id, errored=errored)
        if started_at is not None and claim.ahead_of_time:
            lag = (started_at - execution.scheduled_at).total_seconds()
            record_run_started_into(pipe, tier=execution.queue, lag_seconds=lag)
        started_at = started_at or claim.claimed_at
        if started_at is not None:
            compute_seconds_add_into(
                pipe,
                tenant_id=execution.tenant_id,
                seconds=(now - started_at).total_seconds(),
                now=now,
            )

    def crashed(self) -> None:
        """A run whose handler raised through the runner (it never finished): the worker's
        active count goes down and an error is counted."""
        try:
            registry.run_ended(self.worker_id, errored=True)
        except Exception:
            logger.exception("could not count the end of a run")
