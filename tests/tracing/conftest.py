"""Tracing on for one test, with the SDK's in-memory exporter: every span as it ends."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracing.setup import TracingConfig, tracing_start, tracing_stop


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
