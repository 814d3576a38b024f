"""Ringing doorbells: the one way a run reaches the broker.

Every place that sends runs to workers (the beat's fires, promoted and re-rung rows, a
trigger or retry after its commit, a DAG wave, runs a worker hands back, a dead worker's
runs) calls `ring`, which takes each batch through the same four steps (after moving the
doorbells of tenants with workers of their own to their queues, `ringing.tenant_pools`):

1. admit (`scheduler_app.ringing.fairness.fair_admit`, Redis only): a tenant's doorbells beyond its
   in-flight cap in a tier are held back;
2. hold back (`services.firing.queued_hold_back`, one UPDATE): their rows go back from
   `queued` to `pending`, so the leader's promote loop offers them again later; they are
   not sent;
3. route (`services.sticky_hints.route`, one MGET): a follow-up run whose execution has a
   sticky hint may go to that worker's own queue; `sticky=False` skips the lookup for first
   attempts, which never have one;
4. publish (`scheduler_app.ringing.publish.publish`): named after their tasks (Flower) and sent, a
   batch per Redis round trip; while tracing is on, each run that carries its trace context
   gets a ring span in its trace (`scheduler_app.ringing.traces`).

`ring_deferring_hold_back` does all but step 2's write and returns what it held back, for a
thread with no database connection of its own to leave the write to its caller (the beat's
publisher thread, `beat.publisher`). Nothing here imports `workers`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from time import time_ns
from typing import NamedTuple

import redis
from django.db import transaction

from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.fairness import fair_admit
from scheduler_app.ringing.publish import publish, with_task_names
from scheduler_app.ringing.sticky import route
from scheduler_app.ringing.tenant_pools import tenant_pools_route
from scheduler_app.ringing.traces import (
    ring_failed_record,
    ring_held_back_record,
    ring_spans_record,
)
from scheduler_app.services.firing import queued_hold_back
from tracing.state import tracer

logger = logging.getLogger(__name__)


class Rung(NamedTuple):
    sent: int
    held_back: list[Doorbell]  # not sent: their rows are still to be put back to `pending`


def ring(
    doorbells: Iterable[Doorbell],
    *,
    sticky: bool = True,
    batch: int = 1,
    processes: int | None = None,
    round_size: int | None = None,
    reason: str = "",
) -> int:
    """Admit, hold back, route and publish doorbells (see the module). Returns how many were
    sent. `batch` > 1 rings up to that many doorbells of one tenant and tier with one
    message (`dispatch.batch_size`, for the burst and the fleet's live `processes`).
    `round_size`: the fair floor of a cold tier (`fairness`), when not the `fleet_round` of
    `batch` and `processes`. `reason`: why runs already rung once are rung again (a
    `RingReason`: the sweeps, a dead worker's runs), on their ring spans."""
    if round_size is None:
        round_size = fleet_round(batch, processes)
    admission = fair_admit(tenant_pools_route(list(doorbells)), fleet_round=round_size)
    ring_held_back_record(admission.held_back)
    doorbells_hold_back(admission.held_back)
    return _route_and_publish(
        admission.admitted, sticky=sticky, batch=batch, processes=processes, reason=reason
    )


def ring_deferring_hold_back(
    doorbells: Iterable[Doorbell],
    *,
    sticky: bool = True,
    batch: int = 1,
    processes: int | None = None,
) -> Rung:
    """`ring`, but the held-back doorbells are returned instead of written: the caller puts
    them back with `doorbells_hold_back` on its own connection. Until then their rows stay
    `queued` without a doorbell, which the requeue grace covers should the caller never get
    there."""
    admission = fair_admit(
        tenant_pools_route(list(doorbells)), fleet_round=fleet_round(batch, processes)
    )
    ring_held_back_record(admission.held_back)
    sent = _route_and_publish(admission.admitted, sticky=sticky, batch=batch, processes=processes)
    return Rung(sent, admission.held_back)


def fleet_round(batch: int, processes: int | None) -> int:
    """How many runs one round of the fleet takes when rung in batches: a tenant's fair
    floor while the tier has drained nothing lately (`fairness`); 0 when the caller rings
    one by one or does not know the fleet."""
    return batch * processes if batch > 1 and processes else 0


def doorbells_hold_back(held_back: Sequence[Doorbell]) -> int:
    """queued -> pending for doorbells fair dispatch held back (one UPDATE)."""
    if not held_back:
        return 0
    return queued_hold_back(execution_ids=[bell.execution_id for bell in held_back])


def ring_after_commit(doorbells: list[Doorbell]) -> None:
    """Ring `doorbells` once the current transaction commits, for a request or a service
    that has just recorded their runs. By then the runs are in PostgreSQL, the record: if
    Redis cannot take the doorbells (down, or full at maxmemory), each run waits as queued and
    the leader rings it again after SCHEDULER_REQUEUE_GRACE. So the caller still succeeded,
    and says so, instead of failing a request whose run exists (a client would retry it and
    get a second run)."""

    def ring_now() -> None:
        try:
            ring(doorbells)
        except redis.RedisError as error:
            logger.warning(
                "%d doorbell(s) not rung (%s); the leader rings them again after the requeue grace",
                len(doorbells),
                error,
            )

    transaction.on_commit(ring_now)


def _route_and_publish(
    bells: list[Doorbell], *, sticky: bool, batch: int, processes: int | None, reason: str = ""
) -> int:
    if not bells:
        return 0
    started_ns = time_ns() if tracer() is not None else 0
    bells = with_task_names(bells)
    # The tier each doorbell was admitted under, kept in the message even when sticky routing
    # sends it to a worker's own queue, so the worker releases the right fairness slot.
    tiers = {bell.execution_id: bell.queue for bell in bells}
    if sticky:
        try:
            bells = route(bells)
        except Exception:  # stickiness is an optimisation: never let it stop a publish
            logger.exception("sticky routing failed; publishing to the tier queues")
    try:
        sent = publish(bells, batch=batch, processes=processes, tiers=tiers)
    except BaseException:
        ring_failed_record(bells)
        raise
    if started_ns:
        ring_spans_record(bells, started_ns=started_ns, reason=reason)
    return sent
