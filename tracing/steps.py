"""A span's steps as its events, kept only where something took time.

A run's two spans show its steps as events (the INSERT returned, the publish began, the
claim returned, the handler started and ended, the finish began). Each event costs the SDK
about 8 µs to add and 3 µs to encode, and on most runs every step is followed by the next
within microseconds: an event between two such steps says nothing the span's own start and
end do not. So a step's event is added only when the step before it or the step after it
(the span's start and end included) took at least `STEP_GAP_NS`: a wait or a piece of work
worth seeing (for its time, for its batch, for the publisher, a slow handler). A run whose
steps all took less than that is its span alone, its start and end; a trace UI draws spans
to the millisecond, and a late or slow run's question is about tens of milliseconds and
more.

The decision is made over the span's whole timeline, once its end is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Span

STEP_GAP_NS = 5_000_000


def steps_events(
    span: Span, steps: Sequence[tuple[str, int]], *, start_ns: int, end_ns: int
) -> None:
    """Add each of `steps` (name, time; 0 for a step that did not happen) whose step
    before or after it took `STEP_GAP_NS` or more, from the span's start (`start_ns`) to its
    end (`end_ns`). Nothing at all when the whole span is shorter than that."""
    if end_ns - start_ns < STEP_GAP_NS:
        return
    times = [start_ns, *(at for _, at in steps if at), end_ns]
    named = [name for name, at in steps if at]
    for index, name in enumerate(named, start=1):
        at = times[index]
        if at - times[index - 1] >= STEP_GAP_NS or times[index + 1] - at >= STEP_GAP_NS:
            span.add_event(name, timestamp=at)
