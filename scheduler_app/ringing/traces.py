"""The ring of each run in its trace: the doorbell that sent it to the workers.

A run this process has just fired is rung in its fire's span (`fire_traces.fire_spans_rung`:
the publish's start an event, its end the span's end), no span of its own. Any other ring (a
run rung again, `RingReason`; promoted from pending, a backfill's; a trigger's; fired by
another process) gets a span of its own, a child of the context its doorbell carries (the
row's), timed over the publish it went out with. One message may ring many runs (a batch
doorbell), each of its own trace. Doorbells without a context, or of an unsampled trace, get
none.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import time_ns

from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.services.fire_traces import (
    RING_FAILED,
    fire_spans_held_back,
    fire_spans_rung,
)
from tracing.context import parent_context, sampled
from tracing.state import tracer

RING_SPAN = "scheduler.ring"
RING_REASON = "scheduler.ring.reason"


class RingReason:
    """Why a run is rung again (`scheduler.ring.reason` on its ring span): the first ring of
    a run has none."""

    REQUEUE = "requeue"  # queued past the grace, its doorbell lost (the leader's sweep)
    REPUBLISH = "republish"  # recorded by the previous leader in its last seconds
    DEAD_WORKER = "dead_worker"  # kept for itself by a worker found dead (the reaper)
    RELEASED = "released"  # given back by a draining worker
    HANDED_BACK = "handed_back"  # stopped for its worker's preemption, checkpointed
    WORKER_LOST = "worker_lost"  # its worker died while it ran: the same attempt re-queued


def ring_spans_record(bells: Sequence[Doorbell], *, started_ns: int, reason: str = "") -> None:
    active = tracer()
    if active is None:
        return
    ended_ns = time_ns()
    # No attributes on a first ring: the fire it is a child of names the run (each costs its
    # encoding); a ring again says why.
    attributes = {RING_REASON: reason} if reason else None
    in_fire_spans = (
        set()
        if reason
        else fire_spans_rung(
            [bell.execution_id for bell in bells], started_ns=started_ns, ended_ns=ended_ns
        )
    )
    for bell in bells:
        if bell.execution_id in in_fire_spans or not sampled(bell.traceparent):
            continue
        span = active.start_span(
            RING_SPAN,
            context=parent_context(bell.traceparent),
            start_time=started_ns,
            attributes=attributes,
        )
        span.end(end_time=ended_ns)


def ring_held_back_record(bells: Sequence[Doorbell]) -> None:
    """Fair dispatch held these back: their fire spans, if still open, end saying so."""
    if bells and tracer() is not None:
        fire_spans_held_back([bell.execution_id for bell in bells])


def ring_failed_record(bells: Sequence[Doorbell]) -> None:
    """The publish raised: the fire spans awaiting it end, saying so (the leader's requeue
    sweep rings the runs again, in ring spans of their own)."""
    if bells and tracer() is not None:
        fire_spans_held_back([bell.execution_id for bell in bells], event=RING_FAILED)
