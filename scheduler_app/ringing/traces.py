"""The ring's span of each run: the doorbell that sent it to the workers, in the run's trace.

One message may ring many runs (a batch doorbell), each of its own trace: every run whose
doorbell carries its context (the fire's, from `fires_record`; the row's, from a promote or
a requeue) gets a span of its own, a child of that context, timed over the publish it went
out with. Doorbells without a context, or of an unsampled trace, get none.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import time_ns

from scheduler_app.ringing.doorbell import Doorbell
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


def ring_spans_record(bells: Sequence[Doorbell], *, started_ns: int, reason: str = "") -> None:
    active = tracer()
    if active is None:
        return
    ended_ns = time_ns()
    # No attributes on a first ring: the fire it is a child of names the run (each costs its
    # encoding); a ring again says why.
    attributes = {RING_REASON: reason} if reason else None
    for bell in bells:
        if not sampled(bell.traceparent):
            continue
        span = active.start_span(
            RING_SPAN,
            context=parent_context(bell.traceparent),
            start_time=started_ns,
            attributes=attributes,
        )
        span.end(end_time=ended_ns)
