"""Tracing on for one test, with the SDK's in-memory exporter: every span as it ends."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracing.setup import TracingConfig, tracing_start, tracing_stop
from tracing.steps import STEP_GAP_NS


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = tracing_start(TracingConfig(sampler="always_on", libraries=()), exporter=exporter)
    try:
        yield exporter
    finally:
        tracing_stop(provider)


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def parent_id(span) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def events_of(span) -> dict[str, int]:
    """A span's events by name, each its timestamp (ns): the steps a span covers."""
    return {event.name: event.timestamp for event in span.events}


def steps_of(span, steps: list[str], *, always: frozenset[str] = frozenset()) -> dict[str, int]:
    """A span's events, checked against the steps it may show (in that order): those of
    `always` are there (the test made the steps around them wait); any other is there only
    when a step beside it took `STEP_GAP_NS` or more (`tracing.steps`: an event between two
    quick steps says nothing the span's start and end do not), so a span shorter than that
    has none. Their timestamps never go back, from the span's start to its end."""
    found = events_of(span)
    assert [name for name in steps if name in found] == list(found), list(found)
    assert always <= set(found), list(found)
    if not found:
        return found
    times = [found[name] for name in steps if name in found]
    assert span.start_time <= times[0] and times == sorted(times) and times[-1] <= span.end_time
    marks = [span.start_time, *times, span.end_time]
    for index in range(1, len(marks) - 1):
        beside = max(marks[index] - marks[index - 1], marks[index + 1] - marks[index])
        assert beside >= STEP_GAP_NS, (list(found)[index - 1], beside)
    return found
