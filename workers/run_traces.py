"""A run's spans on the worker: its claim, its handler and its finish, in the run's trace.

The trace context comes from the run's row (`TaskExecution.traceparent`, written by the fire
or the trigger), never from the broker message: one doorbell may ring many runs, each of its
own trace. The claim span is a child of that context; the handler and the finish are the
claim's children. A run whose stored context was not sampled gets no spans, only its context
passed on to its handler (`TRACEPARENT`, the `traceparent` header), so what it calls keeps
the same decision. While tracing is off, none of this runs (`claims_traced` returns {}).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from time import time_ns

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, StatusCode

from handler_contract.base import HandlerOutcome
from scheduler_app.services.claims import Claim
from tracing.context import parent_context, sampled, traceparent_of
from tracing.state import tracer
from workers.live_logs import LiveLogSink

CLAIM_SPAN = "worker.claim"
HANDLER_SPAN = "worker.handler"
FINISH_SPAN = "worker.finish"


@dataclass(frozen=True)
class RunTrace:
    """Where a claimed run's spans go: under `context` (the claim span's), or nowhere but
    `traceparent` passed on when its trace was not sampled (`context` None)."""

    context: Context | None
    traceparent: str


def claims_traced(
    claims: Sequence[Claim], *, started_ns: int, worker_id: str
) -> dict[uuid.UUID, RunTrace]:
    """A claim span per claimed run, timed over the one statement that claimed them all."""
    active = tracer()
    if active is None:
        return {}
    ended_ns = time_ns()
    traces: dict[uuid.UUID, RunTrace] = {}
    for claim in claims:
        execution = claim.execution
        stored = execution.traceparent
        if stored and not sampled(stored):
            traces[execution.id] = RunTrace(None, stored)
            continue
        # No stored context (a run recorded while tracing was off): a trace of its own.
        span = active.start_span(
            CLAIM_SPAN,
            context=parent_context(stored) or Context(),
            start_time=started_ns,
            # Few: each costs its encoding on every run (the fire's span has the task and
            # the due time; a run started otherwise, its trigger's or DAG run's span).
            attributes={
                "scheduler.execution.id": str(execution.id),
                "scheduler.attempt": execution.attempt,
                "scheduler.worker.id": worker_id,
            },
        )
        span.end(end_time=ended_ns)
        # No traceparent string: a traced run's handler passes on its own span's.
        traces[execution.id] = RunTrace(trace.set_span_in_context(span), "")
    return traces


class HandlerSpan:
    """The handler's span while it runs (the current span: log records carry its ids), and
    the context its handler passes on."""

    def __init__(self, span: Span | None, traceparent: str) -> None:
        self.span = span
        self.traceparent = traceparent

    def outcome(self, outcome: HandlerOutcome) -> None:
        if self.span is None or not self.span.is_recording():
            return
        self.span.set_attribute("scheduler.status", outcome.status)
        if outcome.error_class:
            self.span.set_attribute("scheduler.error_class", outcome.error_class)
        if not outcome.succeeded and outcome.status != "skipped":
            self.span.set_status(StatusCode.ERROR, outcome.error_message[:200])


@contextmanager
def handler_span(run_trace: RunTrace | None, *, handler_type: str) -> Iterator[HandlerSpan]:
    """The handler's span, current while the handler runs (log records carry its ids).
    Started and made current by hand rather than through `start_as_current_span`: its three
    nested context managers cost more than the span itself, once per run."""
    active = tracer()
    if active is None or run_trace is None:
        yield HandlerSpan(None, "")
        return
    if run_trace.context is None:
        yield HandlerSpan(None, run_trace.traceparent)
        return
    span = active.start_span(
        HANDLER_SPAN,
        context=run_trace.context,
        attributes={"scheduler.handler.type": handler_type},
    )
    token = context_api.attach(trace.set_span_in_context(span, run_trace.context))
    try:
        yield HandlerSpan(span, traceparent_of(span))
    except BaseException as error:
        span.record_exception(error)
        span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
        raise
    finally:
        context_api.detach(token)
        span.end()


def trace_ids_log(sink: LiveLogSink, handler: HandlerSpan) -> None:
    """The run's captured log names its trace and the handler's span first, and every line
    the platform writes about the run after it (the handler's start and end, a timeout, a
    cancel, a hand-back) ends with them: to find the trace from a log line, and the log from
    the trace (the execution id is on the fire and the claim). The task's own output
    (stdout, stderr) is left as it printed it."""
    if handler.span is None or not handler.span.is_recording():
        return
    context = handler.span.get_span_context()
    ids = f"trace_id={context.trace_id:032x} span_id={context.span_id:016x}"
    sink.write("system", ids)
    sink.system_suffix = f" [{ids}]"


@contextmanager
def finish_span(run_trace: RunTrace | None) -> Iterator[None]:
    """One run's finish (its statement and what settles in its transaction)."""
    active = tracer()
    if active is None or run_trace is None or run_trace.context is None:
        yield
        return
    with active.start_as_current_span(FINISH_SPAN, context=run_trace.context):
        yield  # a rejected finish (a lost claim) is the run's status in the claim's trace


def finishes_traced(
    run_traces: Sequence[RunTrace | None], *, started_ns: int, accepted: Sequence[bool]
) -> None:
    """A finish span per run of a batch finished together, timed over its one statement."""
    active = tracer()
    if active is None:
        return
    ended_ns = time_ns()
    for run_trace, ok in zip(run_traces, accepted, strict=True):
        if run_trace is None or run_trace.context is None:
            continue
        span = active.start_span(FINISH_SPAN, context=run_trace.context, start_time=started_ns)
        if not ok:
            span.set_attribute("scheduler.finish.accepted", False)
        span.end(end_time=ended_ns)
