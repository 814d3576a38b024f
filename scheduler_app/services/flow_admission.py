"""Flow control at the claim: whether claimed runs under concurrency keys, pools or rate limits
may start, decided in PostgreSQL alone, exactly, for a whole batch in one transaction.

Why PostgreSQL and no Redis counter: the claim already talks to PostgreSQL, and the counts
are small indexed reads there (the running runs that hold a key, on a partial GIN index; a
rate key's starts in its window, on a btree), so a Redis mirror would save nothing worth a
second truth to rebuild. There is nothing to lose with Redis, nothing to rebuild after it, and
what a run holds is on its own row: its finish, a cancel or the reaper (its lease ended: a
SIGKILLed worker) frees the slot in the same statement that ends the run, and a row whose
lease has run out is not counted even before the reaper comes.

Exactly, across any number of workers and beats: the admission takes a transaction-scoped
advisory lock per counter key (in one sorted order, so two batches never deadlock), counts,
then writes what it admits before the commit releases the locks. A run that was claimed but
is not yet admitted holds nothing (`flow_holds` is NULL until then; the claim clears it).
The decision runs in the database (`scheduler_flow_admit`, migration 0036), so a batch's
admission is one round trip and one commit however many runs and keys it has; the Python side
renders the keys (tenant templates, under the expression budget) and reads the verdicts. A
claim with no limited run never comes here (`claim_needs_flow`: a dict test).

A run that may not start goes back to `pending` with a `waiting_for` (why, shown everywhere)
and a `flow_wake_at` (when it is looked at again: a recheck for a slot, the window's opening
for a rate), keeping its `scheduled_at`. A slot freed by a finish (or a pool made larger) is
handed to its key's oldest waiter in the same transaction, under the same locks, and rung
when it commits (`flow_waiters_wake`), so it is claimed at once; the leader's promote loop
(`services.firing.due_pending_promote`) brings back only the head of each key's line at its
recheck, the fallback for a slot freed another way (a lease that ended). Deferred, never
dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduler_app import db_rows
from scheduler_app.choices import ExecutionStatus
from scheduler_app.flow_spec import Limit, RunContext, dag_of_node_task, flow_limits
from scheduler_app.limits import expression_budget
from scheduler_app.models import FlowRateStart
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring_after_commit
from scheduler_app.services.audit import audit_record
from scheduler_app.services.claims import Claim
from scheduler_app.services.run_signals import cancel_request

logger = logging.getLogger(__name__)


@dataclass
class FlowVerdict:
    """What the admission made of a batch: the runs that start, the ones sent back to wait
    (already written), and the ones their strategy ends (`skip`: skipped, `cancel_newest`:
    cancelled), which the caller finishes through the run's end (`runs.finish`) so a DAG node
    settles as for any end: (claim, status, message)."""

    admitted: list[Claim] = field(default_factory=list)
    waiting: list[Claim] = field(default_factory=list)
    ended: list[tuple[Claim, str, str]] = field(default_factory=list)


def claim_needs_flow(claim: Claim) -> bool:
    return bool(claim.task.flow_control)


def flow_recheck_delay(claim: Claim, *, now: datetime) -> timedelta:
    """How long a run waiting for a slot waits before it is looked at again, if no finish
    hands it a slot first: FLOW_RECHECK_SECONDS at first, then a quarter of how long it has
    waited since it fell due, at most FLOW_RECHECK_MAX_SECONDS; spread by +-25% so a key's
    waiters do not all come back at once.

    Why it grows: a finish hands its freed slots to the key's oldest waiters and rings them
    (`flow_waiters_wake`), so the recheck is only the fallback for a slot freed another way
    (a lease that ended, a pool made larger). Rechecked every 0.25 s, a backlog of N waiters
    cost 4N claims a second, which kept the claimers from the runs a finish had rung."""
    waited = max(0.0, (now - claim.execution.scheduled_at).total_seconds())
    seconds = min(settings.FLOW_RECHECK_MAX_SECONDS, max(settings.FLOW_RECHECK_SECONDS, waited / 4))
    return timedelta(seconds=seconds * random.uniform(0.75, 1.25))


def _lock_id(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


def _run_context(claim: Claim) -> RunContext:
    task = claim.task
    return RunContext(
        tenant_id=str(task.tenant_id),
        task=task.name,
        dag=dag_of_node_task(task.description),
        parameters={**(task.parameters or {}), **(claim.execution.parameters or {})},
    )


def run_limits(claim: Claim) -> list[Limit]:
    """The run's limits; a pool's size is read by the admission itself, under its lock
    (`maximum` 0 here, sent as NULL)."""
    run = _run_context(claim)
    return flow_limits(claim.task.flow_control, run=run, pool_sizes={}, budget=expression_budget())


# One round trip and one commit for the batch: the database function of migration 0036
# locks the keys, counts them, decides each run in due order and writes the outcome.
_ADMIT_SQL = (
    "SELECT out_run, out_verdict, out_waiting_for FROM scheduler_flow_admit(%s::timestamptz, "
    "%s::bigint[], %s::uuid[], %s::uuid[], %s::uuid[], %s::timestamptz[], %s::int[], "
    "%s::text[], %s::text[], %s::text[], %s::int[], %s::int[], %s::int[], %s::text[])"
)


def flow_admit(*, claims: Sequence[Claim], now: datetime | None = None) -> FlowVerdict:
    """Admit, send back to wait, or end (by their strategy) these claimed runs, each under its
    limits, in due-time order. The waiting ones are written (committed, unless the caller
    holds a transaction) when this returns, and the admitted ones hold their slots."""
    now = now or timezone.now()
    verdict = FlowVerdict()
    if not claims:
        return verdict
    ordered = sorted(claims, key=lambda claim: claim.execution.scheduled_at)
    limit_runs: list[int] = []
    limits: list[Limit] = []
    for index, claim in enumerate(ordered, start=1):
        run = run_limits(claim)
        limits += run
        limit_runs += [index] * len(run)
    params = [
        now,
        sorted({_lock_id(limit.key) for limit in limits}),
        [claim.execution.id for claim in ordered],
        [claim.claim_token for claim in ordered],
        [claim.task.tenant_id for claim in ordered],
        [now + flow_recheck_delay(claim, now=now) for claim in ordered],
        limit_runs,
        [limit.kind for limit in limits],
        [limit.key for limit in limits],
        [limit.shown for limit in limits],
        [None if limit.kind == "pool" else limit.maximum for limit in limits],
        [limit.weight for limit in limits],
        [limit.per_seconds for limit in limits],
        [limit.strategy for limit in limits],
    ]
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(_ADMIT_SQL, params, prepare=db_rows.prepare_statements())
        rows = cursor.fetchall()
    cancelled: list[tuple[Claim, dict[str, Any]]] = []
    for index, outcome, shown_json in rows:
        claim = ordered[index - 1]
        # Django's connection loads jsonb as text (its JSONField decodes it).
        shown = json.loads(shown_json) if isinstance(shown_json, str) else shown_json
        if outcome == "admitted":
            verdict.admitted.append(claim)
        elif outcome == "waiting":
            verdict.waiting.append(claim)
            if "cancelling" in shown:
                cancelled.append((claim, shown))
        else:
            status = (
                ExecutionStatus.SKIPPED if outcome == "skip" else ExecutionStatus.CANCELLED
            ).value
            verdict.ended.append((claim, status, _reason(shown)))
    for claim, shown in cancelled:
        _cancel_in_progress(claim, shown)
    return verdict


def _reason(shown: dict[str, Any]) -> str:
    return (
        f"{shown['kind']} key {shown['key']!r} at its limit "
        f"({shown['running']} of {shown['max']} running)"
    )


def _cancel_in_progress(claim: Claim, shown: dict[str, Any]) -> None:
    """The newest wins: the oldest running holders of the key that the admission chose, enough
    of them to make room, are asked to stop (the existing cancel signal,
    `run_signals.cancel_request`); the newcomer waits for their slots. A holder this run
    already cancelled (its earlier `waiting_for`) is asked again but not audited twice."""
    already = set((claim.execution.waiting_for or {}).get("cancelling") or [])
    for holder_id in shown["cancelling"]:
        cancel_request(execution_id=holder_id)
        if holder_id not in already:
            audit_record(
                tenant=claim.execution.tenant,
                actor="system",
                action="execution.cancel",
                object_type="execution",
                object_id=holder_id,
                reason=f"cancel_in_progress: run {claim.execution.id} of key {shown['key']!r}",
            )


_KIND_OF_PREFIX = {"c": "concurrency", "p": "pool"}


def flow_waiters_wake(*, released: Sequence[dict[str, int]], now: datetime) -> int:
    """Runs ended holding these slots ({counter key: slots} each): as many of each key's
    oldest waiting runs as slots came free are handed them, in the finish's transaction:
    pending -> queued, rung once it commits (`ring_after_commit`), so a worker claims them at
    once instead of at the leader's next promote round or their recheck. Under the keys'
    advisory locks, as the admission is: a run an admission is turning away for want of these
    slots is waiting (committed) by the time the finish looks, so it is not missed. Their
    admission still decides (a newcomer may take the slot first; the waiter then waits again,
    first in line).
    A cancel or a lost lease frees its slot too, and its waiters come at their recheck.
    Returns how many were rung."""
    freed: dict[str, int] = {}
    for holds in released:
        for key, slots in holds.items():
            freed[key] = freed.get(key, 0) + int(slots)
    if not freed:
        return 0
    parts = [counter_key.split(":", 2) for counter_key in freed]
    with db_rows.server_bound_cursor() as cursor:
        # One round trip however many keys: their locks, then each key's oldest waiters, as
        # many as its slots (SKIP LOCKED: a row the leader is promoting right now is rung by
        # it). The database function is migration 0036's.
        cursor.execute(
            "SELECT id, tenant_id, queue, task_id, traceparent FROM scheduler_flow_hand_on("
            "%s::timestamptz, %s::bigint[], %s::uuid[], %s::text[], %s::text[], %s::int[])",
            [
                now,
                sorted({_lock_id(counter_key) for counter_key in freed}),
                [tenant_id for _, tenant_id, _ in parts],
                [_KIND_OF_PREFIX.get(prefix, prefix) for prefix, _, _ in parts],
                [shown for _, _, shown in parts],
                list(freed.values()),
            ],
            prepare=db_rows.prepare_statements(),
        )
        rows = cursor.fetchall()
    if rows:
        ring_after_commit(
            [
                Doorbell(
                    str(run_id),
                    str(tenant_id),
                    str(queue),
                    task_id=str(task_id),
                    traceparent=traceparent or "",
                )
                for run_id, tenant_id, queue, task_id, traceparent in rows
            ]
        )
    return len(rows)


def flow_rate_starts_prune(*, now: datetime) -> int:
    """Delete the rate starts older than the longest window (an hour): no limit reads them."""
    deleted, _ = FlowRateStart.objects.filter(started_at__lt=now - timedelta(hours=1)).delete()
    return deleted
