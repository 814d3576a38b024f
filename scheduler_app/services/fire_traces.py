"""The traces a fire starts: one span per fire, the root of its run's trace.

Opened before the batch's INSERT and ended after it, so a span covers its fire's recording;
its context is written with the row (`traceparent`), in the same statement, and every later
step of the run (the ring, the worker's claim, handler and finish) continues it. A fire that
another scheduler had recorded already (ON CONFLICT DO NOTHING) keeps its span, marked
`scheduler.fire.recorded` false: the trace of a double decision, with no run under it.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.trace import Span

from tracing.context import traceparent_of
from tracing.state import tracer


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

    def end(self, *, recorded: Collection[object]) -> None:
        for span, execution_id in zip(self.spans, self.execution_ids, strict=True):
            if execution_id not in recorded and span.is_recording():
                span.set_attribute("scheduler.fire.recorded", False)
            span.end()


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
