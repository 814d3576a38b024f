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

A run that may not start goes back to `pending` with a `waiting_for` (why, shown everywhere)
and a `flow_wake_at` (when it is looked at again: a short recheck for a slot, the window's
opening for a rate), keeping its `scheduled_at`, so the leader's promote loop
(`services.firing.due_pending_promote`) brings the waiting runs back oldest first, a few per
key a round (fair across keys). Deferred, never dropped. Runs without flow control never come
here (`claim_needs_flow`: a dict test).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.choices import ExecutionStatus
from scheduler_app.flow_spec import Limit, RunContext, dag_of_node_task, flow_limits
from scheduler_app.limits import expression_budget
from scheduler_app.models import FlowRateStart, Pool, TaskExecution
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


def flow_recheck_delay() -> timedelta:
    """How long a run waiting for a slot waits before it is looked at again:
    FLOW_RECHECK_SECONDS, spread by +-25% so a key's waiters do not all come back at once."""
    return timedelta(seconds=settings.FLOW_RECHECK_SECONDS * random.uniform(0.75, 1.25))


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


def _pool_sizes(claims: Sequence[Claim]) -> dict[tuple[str, str], int]:
    wanted = {
        (str(claim.task.tenant_id), claim.task.flow_control["pool"])
        for claim in claims
        if "pool" in claim.task.flow_control
    }
    if not wanted:
        return {}
    rows = Pool.objects.filter(
        tenant_id__in={tenant for tenant, _ in wanted}, name__in={name for _, name in wanted}
    ).values_list("tenant_id", "name", "slots")
    return {(str(tenant), name): slots for tenant, name, slots in rows}


def run_limits(claim: Claim, pool_sizes: dict[tuple[str, str], int]) -> list[Limit]:
    run = _run_context(claim)
    return flow_limits(
        claim.task.flow_control,
        run=run,
        pool_sizes={
            name: size for (tenant, name), size in pool_sizes.items() if tenant == run.tenant_id
        },
        budget=expression_budget(),
    )


_LOCK_SQL = "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k"
_HELD_SQL = (
    f"SELECT h.key, sum(h.value::int) FROM {TaskExecution._meta.db_table} e, "
    "jsonb_each_text(e.flow_holds) h WHERE e.status IN (%s, %s) AND e.flow_holds IS NOT NULL "
    "AND e.flow_holds ?| %s::text[] AND e.lease_expires_at > %s AND h.key = ANY(%s) "
    "AND e.id <> ALL(%s::uuid[]) GROUP BY h.key"
)
_RATE_SQL = (
    "SELECT u.key, count(s.id), min(s.started_at) "
    "FROM unnest(%s::text[], %s::timestamptz[]) AS u(key, since) "
    f"LEFT JOIN {FlowRateStart._meta.db_table} s ON s.key = u.key "
    "AND s.started_at > u.since GROUP BY u.key"
)


def _lock_and_count(every: dict[str, Limit], *, now: datetime, batch: list[Any]) -> _Counts:
    """Lock the keys, then count them, in one round trip: the statements run in turn, each
    with its own snapshot (read committed), so the counts see every admission committed
    before the locks were granted. (A run's claim pays this trip, so it is one, not three.)
    Held: by the running runs, and by the queued runs a lost worker's requeue kept their
    slots for (`services.losses`), until their lease; not by this batch's own runs."""
    slot_keys = [key for key, limit in every.items() if not limit.per_seconds]
    rates = {key: limit.per_seconds for key, limit in every.items() if limit.per_seconds}
    statements = [_LOCK_SQL]
    params: list[Any] = [sorted({_lock_id(key) for key in every})]
    if slot_keys:
        statements.append(_HELD_SQL)
        params += [ExecutionStatus.RUNNING.value, ExecutionStatus.QUEUED.value]
        params += [slot_keys, now, slot_keys, batch]
    if rates:
        statements.append(_RATE_SQL)
        params += [list(rates), [now - timedelta(seconds=rates[key]) for key in rates]]
    held: dict[str, int] = {}
    rate: dict[str, tuple[int, datetime | None]] = {}
    with connection.cursor() as cursor:
        cursor.execute("; ".join(statements), params)
        if slot_keys:
            cursor.nextset()
            held = {key: int(total) for key, total in cursor.fetchall()}
        if rates:
            cursor.nextset()
            rate = {key: (count, oldest) for key, count, oldest in cursor.fetchall()}
    return _Counts(held=held, rate=rate)


def _holders(key: str, *, now: datetime) -> list[tuple[Any, int]]:
    """The running runs that hold `key`, oldest first: (id, slots)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id, (e.flow_holds ->> %s)::int FROM {TaskExecution._meta.db_table} e "
            "WHERE e.status = %s AND e.flow_holds ? %s AND e.lease_expires_at > %s "
            "ORDER BY e.started_at",
            [key, ExecutionStatus.RUNNING.value, key, now],
        )
        return cursor.fetchall()


@dataclass
class _Counts:
    held: dict[str, int]
    rate: dict[str, tuple[int, datetime | None]]
    admitted_rate: dict[str, int] = field(default_factory=dict)

    def used(self, limit: Limit) -> int:
        if limit.per_seconds:
            return self.rate.get(limit.key, (0, None))[0] + self.admitted_rate.get(limit.key, 0)
        return self.held.get(limit.key, 0)

    def take(self, limit: Limit) -> None:
        if limit.per_seconds:
            self.admitted_rate[limit.key] = self.admitted_rate.get(limit.key, 0) + 1
        else:
            self.held[limit.key] = self.held.get(limit.key, 0) + limit.weight

    def window_opens(self, limit: Limit, *, now: datetime) -> datetime:
        oldest = self.rate.get(limit.key, (0, None))[1] or now
        return min(oldest, now) + timedelta(seconds=limit.per_seconds)


def waiting_for_of(limit: Limit, used: int) -> dict[str, Any]:
    """What a waiting run shows: the limit's kind, the key as the tenant wrote it rendered,
    how much of it is in use (running runs, a pool's slots, starts in the window) and its
    maximum."""
    shown: dict[str, Any] = {
        "kind": limit.kind,
        "key": limit.shown,
        "running": used,
        "max": limit.maximum,
    }
    if limit.per_seconds:
        shown["per_seconds"] = limit.per_seconds
    return shown


def flow_admit(*, claims: Sequence[Claim], now: datetime | None = None) -> FlowVerdict:
    """Admit, send back to wait, or end (by their strategy) these claimed runs, each under its
    limits, in due-time order. The waiting ones are written here; the admitted ones hold
    their slots when this returns (committed)."""
    now = now or timezone.now()
    verdict = FlowVerdict()
    if not claims:
        return verdict
    pool_sizes = _pool_sizes(claims)
    ordered = sorted(claims, key=lambda claim: claim.execution.scheduled_at)
    limits = {claim.execution.id: run_limits(claim, pool_sizes) for claim in ordered}
    every = {limit.key: limit for run in limits.values() for limit in run}
    waits: list[tuple[Claim, dict[str, Any], datetime]] = []
    holds: list[tuple[Claim, dict[str, int]]] = []
    starts: list[FlowRateStart] = []
    with transaction.atomic():
        counts = _lock_and_count(every, now=now, batch=[claim.execution.id for claim in ordered])
        for claim in ordered:
            run = limits[claim.execution.id]
            blocking = next(
                (limit for limit in run if counts.used(limit) + limit.weight > limit.maximum),
                None,
            )
            if blocking is None:
                for limit in run:
                    counts.take(limit)
                holds.append(
                    (claim, {limit.key: limit.weight for limit in run if not limit.per_seconds})
                )
                starts.extend(
                    FlowRateStart(key=limit.key, started_at=now, execution_id=claim.execution.id)
                    for limit in run
                    if limit.per_seconds
                )
                verdict.admitted.append(claim)
                continue
            shown = waiting_for_of(blocking, counts.used(blocking))
            if blocking.strategy == "skip":
                verdict.ended.append((claim, ExecutionStatus.SKIPPED.value, _reason(shown)))
                continue
            if blocking.strategy == "cancel_newest":
                verdict.ended.append((claim, ExecutionStatus.CANCELLED.value, _reason(shown)))
                continue
            if blocking.strategy == "cancel_in_progress":
                shown["cancelling"] = _cancel_in_progress(claim, blocking, now=now)
            wake = (
                counts.window_opens(blocking, now=now)
                if blocking.per_seconds
                else now + flow_recheck_delay()
            )
            waits.append((claim, shown, wake))
            verdict.waiting.append(claim)
        _write_holds(holds)
        if starts:
            FlowRateStart.objects.bulk_create(starts)
        _write_waits(waits, now=now)
    return verdict


def _reason(shown: dict[str, Any]) -> str:
    return (
        f"{shown['kind']} key {shown['key']!r} at its limit "
        f"({shown['running']} of {shown['max']} running)"
    )


def _cancel_in_progress(claim: Claim, limit: Limit, *, now: datetime) -> list[str]:
    """The newest wins: ask the oldest running holders of the key to stop (the existing cancel
    signal, `run_signals.cancel_request`), enough of them to make room; the newcomer waits for
    their slots. A holder this run already cancelled (its earlier `waiting_for`) is asked
    again but not audited twice."""
    already = set((claim.execution.waiting_for or {}).get("cancelling") or [])
    holders = _holders(limit.key, now=now)
    room_needed = sum(slots for _, slots in holders) + limit.weight - limit.maximum
    chosen: list[str] = []
    for holder_id, slots in holders:
        if room_needed <= 0:
            break
        chosen.append(str(holder_id))
        room_needed -= slots
    for holder_id in chosen:
        cancel_request(execution_id=holder_id)
        if holder_id not in already:
            audit_record(
                tenant=claim.execution.tenant,
                actor="system",
                action="execution.cancel",
                object_type="execution",
                object_id=holder_id,
                reason=f"cancel_in_progress: run {claim.execution.id} of key {limit.shown!r}",
            )
    return chosen


def _write_holds(holds: list[tuple[Claim, dict[str, int]]]) -> None:
    if not holds:
        return
    flow_holds = TaskExecution._meta.get_field("flow_holds")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TaskExecution._meta.db_table} e SET flow_holds = u.holds, "
            "waiting_for = NULL, flow_wake_at = NULL "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::jsonb[]) AS u(id, token, holds) "
            "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s",
            [
                [claim.execution.id for claim, _ in holds],
                [claim.claim_token for claim, _ in holds],
                [
                    flow_holds.get_db_prep_value(held or None, connection, prepared=False)
                    for _, held in holds
                ],
                ExecutionStatus.RUNNING.value,
            ],
        )


def _write_waits(waits: list[tuple[Claim, dict[str, Any], datetime]], *, now: datetime) -> None:
    """running (claimed, not started) -> pending, keeping its scheduled_at (its place in the
    line), with why it waits and when it is looked at again."""
    if not waits:
        return
    waiting_for = TaskExecution._meta.get_field("waiting_for")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TaskExecution._meta.db_table} e SET status = %s, queued_at = NULL, "
            "started_at = NULL, worker_id = '', claim_token = NULL, lease_expires_at = NULL, "
            "flow_holds = NULL, waiting_for = u.waiting_for, flow_wake_at = u.wake, "
            "updated_at = %s "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::jsonb[], %s::timestamptz[]) "
            "AS u(id, token, waiting_for, wake) "
            "WHERE e.id = u.id AND e.claim_token = u.token AND e.status = %s",
            [
                ExecutionStatus.PENDING.value,
                now,
                [claim.execution.id for claim, _, _ in waits],
                [claim.claim_token for claim, _, _ in waits],
                [
                    waiting_for.get_db_prep_value(shown, connection, prepared=False)
                    for _, shown, _ in waits
                ],
                [wake for _, _, wake in waits],
                ExecutionStatus.RUNNING.value,
            ],
        )


_KIND_OF_PREFIX = {"c": "concurrency", "p": "pool"}


def flow_waiters_wake(*, released: Sequence[dict[str, int]], now: datetime) -> None:
    """Runs ended holding these slots ({counter key: slots} each): as many of each key's
    oldest waiting runs as slots came free are due to be looked at now, instead of at their
    recheck time, so a freed slot is taken within a promote round. A cancel or a lost lease
    frees its slot too, and its waiters come at their recheck."""
    freed: dict[str, int] = {}
    for holds in released:
        for key, slots in holds.items():
            freed[key] = freed.get(key, 0) + int(slots)
    if not freed:
        return
    parts = [counter_key.split(":", 2) for counter_key in freed]
    table = TaskExecution._meta.db_table
    with connection.cursor() as cursor:
        # One statement however many keys: each key's oldest waiters, as many as its slots.
        cursor.execute(
            f"UPDATE {table} e SET flow_wake_at = %s FROM (SELECT w.id FROM "
            "unnest(%s::uuid[], %s::text[], %s::text[], %s::int[]) AS u(tenant_id, kind, key, "
            f"slots) CROSS JOIN LATERAL (SELECT x.id FROM {table} x WHERE x.status = %s "
            "AND x.waiting_for IS NOT NULL AND x.tenant_id = u.tenant_id "
            "AND (x.waiting_for ->> 'key') = u.key AND x.waiting_for ->> 'kind' = u.kind "
            "AND x.flow_wake_at > %s ORDER BY x.scheduled_at LIMIT u.slots) w) woken "
            "WHERE e.id = woken.id AND e.status = %s",
            [
                now,
                [tenant_id for _, tenant_id, _ in parts],
                [_KIND_OF_PREFIX.get(prefix, prefix) for prefix, _, _ in parts],
                [shown for _, _, shown in parts],
                list(freed.values()),
                ExecutionStatus.PENDING.value,
                now,
                ExecutionStatus.PENDING.value,
            ],
        )


def flow_rate_starts_prune(*, now: datetime) -> int:
    """Delete the rate starts older than the longest window (an hour): no limit reads them."""
    deleted, _ = FlowRateStart.objects.filter(started_at__lt=now - timedelta(hours=1)).delete()
    return deleted
