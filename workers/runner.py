"""The one runner: claim what a doorbell rang for (one run, or a batch of one tenant and
tier), count its start, run it, finish it. A single doorbell is a batch of one.

The hot path of the whole system (every run passes here), so it is kept to a few round
trips: one statement claims the runs with their tasks and tenants, one counts each tenant's
running runs (quota), one statement finishes the runs with their logs, and the Redis
bookkeeping (fairness slot, lag histogram, quota counters, fleet counters, retry budget, a
cancel check; `workers.run_ledger`) travels in one pipeline at the start and one at the end.
How the claimed runs then run (in order or in lanes, spilling what waits) is
`workers.batch`; their handlers, `workers.execute`; their finish, `workers.finishing`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from time import time_ns

from django.conf import settings

from dags.engine.dispatch import HandOn
from scheduler_app.redis_client import get_redis
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.services.claims import Claim, executions_claim
from scheduler_app.services.quotas import (
    Deferral,
    quota_decide_counts,
    quota_defer_batch,
    quota_running_count,
)
from tracing.state import tracer
from workers.batch import Batch, Item
from workers.batch_lanes import batch_width
from workers.flow_gate import flow_gate
from workers.run_ledger import RunLedger, Started
from workers.run_traces import RunTrace, claims_traced

logger = logging.getLogger(__name__)


def executions_run(
    *,
    execution_ids: Sequence[str],
    worker_id: str,
    tenant_id: str | None = None,
    queue: str | None = None,
    hand_on: HandOn | None = None,
) -> Counter[str]:
    """Claim, start, run and finish the runs; returns how many ended how ('success',
    'failed', ..., 'rejected': the finish lost its claim, 'deferred': over the tenant's
    quota or held back by flow control, 'duplicate': not claimable, another delivery or a
    cancel took it). A DAG node's successor this worker may run next is in `hand_on`
    (`dags.engine.dispatch`)."""
    config = settings.WORKER
    ledger = RunLedger(worker_id)
    writes = CoalescedWrites()
    claim_started_ns = time_ns() if tracer() is not None else 0
    claims = executions_claim(
        execution_ids=execution_ids,
        worker_id=worker_id,
        lease_seconds=config["LEASE_SECONDS"],
        metrics_pipe=writes,
    )
    # Tracing on: each run's claim span, in the trace its row carries.
    traces = (
        claims_traced(claims, started_ns=claim_started_ns, worker_id=worker_id)
        if claim_started_ns
        else {}
    )
    # Every doorbell reached a worker, claimed or not (a duplicate delivery).
    ledger.doorbells_answered_into(
        writes,
        [str(execution_id) for execution_id in execution_ids],
        tenant_id=tenant_id,
        queue=queue,
    )
    items, room = _start(claims, writes, ledger=ledger, traces=traces)
    width = batch_width(
        [item.claim.task.handler_type for item in items],
        parallel=config["BATCH_PARALLEL"],
        room=room,
    )
    outcomes = Batch(
        items,
        ledger=ledger,
        spill_seconds=config["BATCH_SPILL_SECONDS"],
        width=width,
        hand_on=hand_on,
    ).run()
    counts = Counter(outcomes)
    if len(items) < len(claims):
        counts["deferred"] += len(claims) - len(items)
    if len(claims) < len(execution_ids):
        counts["duplicate"] += len(execution_ids) - len(claims)
    return counts


def execution_run(
    *,
    execution_id: str,
    worker_id: str,
    tenant_id: str | None = None,
    queue: str | None = None,
    hand_on: HandOn | None = None,
) -> str:
    """One run (a batch of one); returns what happened, for the worker's log: 'duplicate',
    'deferred', 'rejected' or the run's status."""
    counts = executions_run(
        execution_ids=[execution_id],
        worker_id=worker_id,
        tenant_id=tenant_id,
        queue=queue,
        hand_on=hand_on,
    )
    if counts["duplicate"]:
        logger.info("execution %s not claimable; dropping the message", execution_id)
    return next(iter(counts))


def execution_batch_run(
    *,
    execution_ids: Sequence[str],
    worker_id: str,
    tenant_id: str | None = None,
    queue: str | None = None,
    hand_on: HandOn | None = None,
) -> str:
    """A batch; returns a summary for the worker's log, e.g. 'batch of 16: 15 success, 1
    failed'."""
    counts = executions_run(
        execution_ids=execution_ids,
        worker_id=worker_id,
        tenant_id=tenant_id,
        queue=queue,
        hand_on=hand_on,
    )
    return batch_summary(len(execution_ids), counts)


def batch_summary(size: int, counts: Counter[str]) -> str:
    summary = ", ".join(f"{n} {what}" for what, n in counts.most_common())
    return f"batch of {size}: {summary}"


def _start(
    claims: list[Claim],
    writes: CoalescedWrites,
    *,
    ledger: RunLedger,
    traces: dict[object, RunTrace],
) -> tuple[list[Item], int]:
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
    counts = {tenant: quota_running_count(tenant_id=tenant, now=now) for tenant in by_tenant}
    running = {tenant: counts[tenant].total - (len(by_tenant[tenant]) - 1) for tenant in counts}
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
            settled=counts[tenant].settled,
        )
        if deferral is not None:
            logger.debug("execution %s deferred: tenant over %s", execution.id, deferral.quota)
            deferred.append((claim, deferral))
            continue
        items.append(
            Item(
                claim,
                started.counted[tenant],
                started.stop_requested(index),
                traces.get(execution.id),
            )
        )
    if deferred:
        _defer(deferred, started, ledger=ledger)
    # Last, of what the quota let through: the flow-control limits (keys, pools, rates).
    return flow_gate(items, ledger=ledger, now=now), room


def _defer(deferred: list[tuple[Claim, Deferral]], started: Started, *, ledger: RunLedger) -> None:
    """The batch's runs over quota back to pending in one statement, their start (hourly
    count included) undone in one round trip, and one line at INFO for the batch."""
    quota_defer_batch(
        [(claim.execution, claim.claim_token, deferral) for claim, deferral in deferred]
    )
    claims = [claim for claim, _deferral in deferred]
    if started.replies is not None:
        ledger.unstart(
            claims,
            at=started.at,
            counted=[started.counted[claim.execution.tenant_id] for claim in claims],
        )
    quotas = Counter(deferral.quota for _claim, deferral in deferred)
    logger.info(
        "%s claimed runs deferred: tenant over %s",
        len(claims),
        ", ".join(f"{quota} ({n})" for quota, n in quotas.most_common()),
    )
