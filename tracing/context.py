"""W3C trace context as the string a run carries in its row (`traceparent`).

A broker message is a doorbell carrying only execution ids, and one doorbell may ring many
runs, so the context of each run travels in its own row: written with the fire's INSERT,
read back at the claim. Parsed here by hand instead of through the propagator: a fire storm
reads thousands of them a second, and the propagator's regular expression and carrier
protocol cost several times more than slicing a fixed-width string.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

# "00-" + 32 hex trace id + "-" + 16 hex span id + "-" + 2 hex flags
TRACEPARENT_LENGTH = 55


def traceparent_of(span: Span) -> str:
    """The span's context as a `traceparent` header value ("" for an invalid one)."""
    context = span.get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def span_context_of(traceparent: str) -> SpanContext | None:
    """The remote span context a stored `traceparent` names, or None for "" or garbage."""
    if len(traceparent) != TRACEPARENT_LENGTH or traceparent[:3] != "00-":
        return None
    try:
        trace_id = int(traceparent[3:35], 16)
        span_id = int(traceparent[36:52], 16)
        flags = int(traceparent[53:55], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def parent_context(traceparent: str) -> Context | None:
    """An OpenTelemetry context whose current span is the stored one, to start children in;
    None when there is none (the child then starts a trace of its own)."""
    span_context = span_context_of(traceparent)
    if span_context is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def sampled(traceparent: str) -> bool:
    """Whether the stored context was sampled: only then is there a trace to show or to
    continue with recorded spans."""
    if len(traceparent) != TRACEPARENT_LENGTH:
        return False
    return traceparent[54] in "13579bdf"  # the flags' low bit


def trace_id_of(traceparent: str) -> str | None:
    """The trace id (32 hex digits) of a sampled stored context, for the API and the
    dashboard; None when the run was not sampled (no trace of it exists anywhere)."""
    if not sampled(traceparent) or span_context_of(traceparent) is None:
        return None
    return traceparent[3:35]
