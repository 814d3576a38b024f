"""The traces a fire starts: one span per fire, the root of its run's trace.

Opened before the batch's INSERT; its context is written with the row (`traceparent`), in
the same statement, and every later step of the run (the ring, the worker's run span)
continues it. A fire the beat rings at once (`fires_record`'s doorbells) keeps its span open
until the ring: the span then covers the recording and the publish, its end the publish's
end, with the INSERT's end (`scheduler.recorded`) and the publish's start
(`scheduler.ring.started`) as its events where a step around them took 5 ms or more (the
INSERT, the doorbell's wait for its publish, the publish: `tracing.steps`): one span where a
span of the ring's own would cost as much again (`scheduler_app.ringing.traces`). A fire
left pending, or a backfill's, ends at its INSERT; so does a fire another scheduler had
recorded already (ON CONFLICT DO NOTHING), marked `scheduler.fire.recorded` false: the
trace of a double decision, with no run under it.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from time import time_ns
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.trace import Span

from tracing.context import traceparent_of
from tracing.state import before_stop_call, tracer
from tracing.steps import steps_events


class _Fire(Protocol):
    """What a span needs of `services.firing.Fire` (named here without importing it: the
    firing service imports this module)."""

    task_id: uuid.UUID
    scheduled_at: datetime


FIRE_SPAN = "scheduler.fire"
# A fire starts a trace: no ambient span (a tick's, a request's) is its parent.
_ROOT = Context()


class FireSpans:
    def __init__(self, spans: list[Span], execution_ids: Sequence[object]) -> None:
        self.spans = spans
        self.execution_ids = execution_ids
        self.traceparents = [traceparent_of(span) for span in spans]

    def end(self, *, recorded: Collection[object], to_ring: Collection[str] = ()) -> None:
        """End each fire's span at its INSERT, but those of `to_ring` (execution ids as
        strings, the doorbells the caller rings next): theirs end at their ring."""
        recorded_ns = time_ns()
        for span, execution_id in zip(self.spans, self.execution_ids, strict=True):
            if not span.is_recording():
                continue  # a sampled-out fire: its span records nothing, ends nowhere
            if execution_id not in recorded:
                span.set_attribute("scheduler.fire.recorded", False)
                span.end(end_time=recorded_ns)
            elif str(execution_id) in to_ring:
                # Its `scheduler.recorded` is decided at the ring (`tracing.steps`).
                _awaiting_ring.park(str(execution_id), span, recorded_ns)
            else:
                span.end(end_time=recorded_ns)


RECORDED = "scheduler.recorded"
RING_STARTED = "scheduler.ring.started"
HELD_BACK = "scheduler.ring.held_back"
RING_FAILED = "scheduler.ring.failed"


class _AwaitingRing:
    """The open fire spans of this process's fires not rung yet, by execution id. Rung from
    the beat's publisher thread, parked from its tick: a lock between them. A fire whose
    ring never comes here (the process stopped between the INSERT and the publish, the
    publish raised) ends at its INSERT once it has waited `MAX_WAIT_NS`, or when the waiting
    outgrow `MAX_WAITING`, whichever comes first."""

    MAX_WAIT_NS = 30_000_000_000
    MAX_WAITING = 50_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: OrderedDict[str, tuple[Span, int]] = OrderedDict()

    def park(self, execution_id: str, span: Span, recorded_ns: int) -> None:
        with self._lock:
            self._spans[execution_id] = (span, recorded_ns)
            stale = []
            while self._spans:
                oldest_id, (_, at) = next(iter(self._spans.items()))
                if recorded_ns - at < self.MAX_WAIT_NS and len(self._spans) <= self.MAX_WAITING:
                    break
                stale.append(self._spans.pop(oldest_id))
        for old, at in stale:
            _end_at_insert(old, at)

    def take(self, execution_ids: Iterable[str]) -> list[tuple[str, Span, int]]:
        """(execution id, span, its INSERT's end) of each of these that waits here."""
        if not self._spans:
            return []
        with self._lock:
            taken = [(key, self._spans.pop(key, None)) for key in execution_ids]
        return [(key, *waiting) for key, waiting in taken if waiting is not None]

    def end_all(self) -> None:
        with self._lock:
            waiting, self._spans = list(self._spans.values()), OrderedDict()
        for span, at in waiting:
            _end_at_insert(span, at)


def _end_at_insert(span: Span, recorded_ns: int) -> None:
    """A parked fire whose ring never came here ends at its INSERT, the last step it saw."""
    span.add_event(RECORDED, timestamp=recorded_ns)
    span.end(end_time=recorded_ns)


_awaiting_ring = _AwaitingRing()


def fire_spans_rung(execution_ids: Iterable[str], *, started_ns: int, ended_ns: int) -> set[str]:
    """End the waiting fire spans of the runs just published, the publish's start as their
    event; returns the execution ids that had one (the others get a ring span of their own:
    a run rung again, or recorded by another process)."""
    rung = set()
    for execution_id, span, recorded_ns in _awaiting_ring.take(execution_ids):
        steps_events(
            span,
            ((RECORDED, recorded_ns), (RING_STARTED, started_ns)),
            start_ns=getattr(span, "start_time", None) or recorded_ns,
            end_ns=ended_ns,
        )
        span.end(end_time=ended_ns)
        rung.add(execution_id)
    return rung


def fire_spans_held_back(execution_ids: Iterable[str], *, event: str = HELD_BACK) -> None:
    """Fair dispatch held these runs back (put back to pending, the leader rings them
    later, in a ring span of their own), or their publish failed (`RING_FAILED`: the leader
    rings them again): their fire spans end now, saying so."""
    now = time_ns()
    for _, span, recorded_ns in _awaiting_ring.take(execution_ids):
        span.add_event(RECORDED, timestamp=recorded_ns)  # rare: the whole story
        span.add_event(event, timestamp=now)
        span.end(end_time=now)


def fire_spans_flush() -> None:
    """End every waiting fire span (tracing stops: nothing may be left unexported)."""
    _awaiting_ring.end_all()


def fire_spans_start(
    fires: Sequence[_Fire],
    *,
    execution_ids: Sequence[object],
    attributes: dict[str, str] | None = None,
) -> FireSpans | None:
    """A span per fire (None while tracing is off: no per-fire work at all). `attributes`:
    more of them on each sampled span, for fires that are not the schedule's own (a
    backfill's)."""
    active = tracer()
    if active is None:
        return None
    spans = []
    for fire, execution_id in zip(fires, execution_ids, strict=True):
        span = active.start_span(FIRE_SPAN, context=_ROOT)
        # Attributes only on sampled spans: an unsampled fire pays for its ids alone. Few of
        # them: each costs its encoding on every fire (the worker's spans hold the rest).
        if span.is_recording():
            span.set_attributes(
                {
                    # The schedule's due time: the instant the fire was owed.
                    "scheduler.schedule.due_at": fire.scheduled_at.isoformat(),
                    "scheduler.task.id": str(fire.task_id),
                    "scheduler.execution.id": str(execution_id),
                    **(attributes or {}),
                }
            )
        spans.append(span)
    return FireSpans(spans, execution_ids)


def trigger_traceparent(*, name: str, attributes: dict[str, str]) -> str:
    """One span for a run or DAG run started by hand, by an event or by the API (a child of
    the request's span when Django is instrumented); its context, to store with the run. ""
    while tracing is off."""
    active = tracer()
    if active is None:
        return ""
    span = active.start_span(name)
    if span.is_recording():
        span.set_attributes(attributes)
    span.end()
    return traceparent_of(span)


before_stop_call(fire_spans_flush)
