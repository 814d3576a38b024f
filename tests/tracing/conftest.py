"""Tracing on for one test, with the SDK's in-memory exporter: every span as it ends."""

from __future__ import annotations

from itertools import pairwise

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


def steps_of(span, steps: list[str], *, always: set[str]) -> dict[str, int]:
    """A span's events, checked against the steps it may show (in that order): those of
    `always` are there; any other is there only when the next came `STEP_GAP_NS` or more
    after it (`tracing.steps`: an event nothing waited after says nothing the next does not).
    Their timestamps never go back, from the span's start to its end."""
    found = events_of(span)
    assert [name for name in steps if name in found] == list(found), list(found)
    assert always <= set(found), list(found)
    times = [found[name] for name in steps if name in found]
    assert span.start_time <= times[0] and times == sorted(times) and times[-1] <= span.end_time
    shown = [name for name in steps if name in found]
    for name, after in pairwise(shown):
        if name not in always:
            assert found[after] - found[name] >= STEP_GAP_NS, (name, after)
    return found
