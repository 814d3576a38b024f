"""A run's one span on the worker (`worker.run`): from its claim to its finish, in the run's
trace, the steps between as the span's events.

One span per run rather than one per step: each span costs the SDK about 20 µs to make and
25 µs to encode for export, several times what an event costs, and the steps of a run on a
worker are sequential, so a span's start, its events and its end show each one's timing:

- the span starts when the claim's statement started (one statement claims a batch);
- `scheduler.claimed`: the claim's statement ended;
- `scheduler.handler.started` / `scheduler.handler.ended`: the handler ran between them
  (the span is the current one meanwhile: log records carry its ids);
- `scheduler.finish.started`: the finish's statement began (a batch's successes are
  finished together: the gap after the handler's end is the wait for the batch);
- the span ends when the finish's statement has committed (`scheduler.finish.accepted`
  false when the claim had been lost).

An event is there only where the step before or after it took 5 ms or more (a wait for the
due time or the batch, a slow claim, a handler that did some work: `tracing.steps`), so they
are added once the span's end is known; a noop run's steps all take microseconds, and its
span alone shows them.

The trace context comes from the run's row (`TaskExecution.traceparent`, written by the fire
or the trigger), never from the broker message: one doorbell may ring many runs, each of its
own trace. A run whose stored context was not sampled gets no span, only its context passed
on to its handler (`TRACEPARENT`, the `traceparent` header), so what it calls keeps the same
decision. While tracing is off, none of this runs (`claims_traced` returns {}).
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
from tracing.steps import steps_events
from workers.live_logs import LiveLogSink

RUN_SPAN = "worker.run"
CLAIMED = "scheduler.claimed"
HANDLER_STARTED = "scheduler.handler.started"
HANDLER_ENDED = "scheduler.handler.ended"
FINISH_STARTED = "scheduler.finish.started"


@dataclass
class RunTrace:
    """Where a claimed run's span goes: under `context` (its row's), or nowhere but
    `traceparent` passed on when its trace was not sampled (`context` None). `span`: the
    run's span once its handler started, until its finish ends it."""

    context: Context | None
    traceparent: str
    claim_started_ns: int = 0
    claimed_ns: int = 0
    worker_id: str = ""
    span: Span | None = None
    handler_started_ns: int = 0
    handler_ended_ns: int = 0

    def events_add(self, span: Span, *, finish_started_ns: int, end_ns: int) -> None:
        """The run's steps as the span's events, where they took time (`tracing.steps`)."""
        steps_events(
            span,
            (
                (CLAIMED, self.claimed_ns),
                (HANDLER_STARTED, self.handler_started_ns),
                (HANDLER_ENDED, self.handler_ended_ns),
                (FINISH_STARTED, finish_started_ns),
            ),
            start_ns=(
                self.claim_started_ns
                or self.handler_started_ns
                or getattr(span, "start_time", None)
                or end_ns
            ),
            end_ns=end_ns,
        )


def claims_traced(
    claims: Sequence[Claim], *, started_ns: int, worker_id: str
) -> dict[uuid.UUID, RunTrace]:
    """Each claimed run's trace, with the one claim statement's timing (no span yet: the
    run's span starts at the claim when its handler starts, a deferred run has none)."""
    if tracer() is None:
        return {}
    ended_ns = time_ns()
    traces: dict[uuid.UUID, RunTrace] = {}
    for claim in claims:
        stored = claim.execution.traceparent
        if stored and not sampled(stored):
            traces[claim.execution.id] = RunTrace(None, stored)
            continue
        # No stored context (a run recorded while tracing was off): a trace of its own.
        traces[claim.execution.id] = RunTrace(
            parent_context(stored) or Context(), "", started_ns, ended_ns, worker_id
        )
    return traces


class HandlerSpan:
    """The run's span while its handler runs (the current span: log records carry its ids),
    and the context its handler passes on."""

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
def handler_span(
    run_trace: RunTrace | None, *, handler_type: str, execution_id: object = "", attempt: int = 1
) -> Iterator[HandlerSpan]:
    """The run's span, started back at its claim and current while the handler runs. Left
    open for the finish to end (`finish_span`, `finishes_traced`), unless the handler raised
    through. Made current by hand rather than through `start_as_current_span`: its three
    nested context managers cost more than the span itself, once per run."""
    active = tracer()
    if active is None or run_trace is None:
        yield HandlerSpan(None, "")
        return
    if run_trace.context is None:
        yield HandlerSpan(None, run_trace.traceparent)
        return
    span = active.start_span(
        RUN_SPAN,
        context=run_trace.context,
        start_time=run_trace.claim_started_ns or None,
        # Few: each costs its encoding on every run (the fire's span has the task and the
        # due time; a run started otherwise, its trigger's or DAG run's span).
        attributes={
            "scheduler.execution.id": str(execution_id),
            "scheduler.attempt": attempt,
            "scheduler.worker.id": run_trace.worker_id,
            "scheduler.handler.type": handler_type,
        },
    )
    run_trace.handler_started_ns = time_ns()
    token = context_api.attach(trace.set_span_in_context(span, run_trace.context))
    try:
        yield HandlerSpan(span, traceparent_of(span))
    except BaseException as error:
        raised_ns = time_ns()
        run_trace.events_add(span, finish_started_ns=0, end_ns=raised_ns)
        span.record_exception(error)
        span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
        span.end(end_time=raised_ns)  # no finish follows
        raise
    else:
        run_trace.handler_ended_ns = time_ns()  # its events at the finish, with its end
        run_trace.span = span
    finally:
        context_api.detach(token)


def trace_ids_log(sink: LiveLogSink, handler: HandlerSpan) -> None:
    """Every line the platform writes about the run in its captured log (the handler's
    start and end, a timeout, a cancel, a hand-back) ends with its trace and run span's
    ids, from the first: to find the trace from a log line, and the log from the trace (the
    execution id is on the fire and the run's span). On the lines the run writes anyway
    rather than a line of their own (a log line costs about 20 µs, a fifth of a traced
    run's spans); `trace_ids_log_end` writes that line only for a run that wrote none. The
    task's own output (stdout, stderr) is left as it printed it."""
    if handler.span is None or not handler.span.is_recording():
        return
    context = handler.span.get_span_context()
    sink.system_suffix = f" [trace_id={context.trace_id:032x} span_id={context.span_id:016x}]"


def trace_ids_log_end(sink: LiveLogSink) -> None:
    """The ids as a system line of their own, for a traced run whose handler wrote no
    system line (cancelled before it started, skipped by its run key, a secret missing)."""
    suffix = sink.system_suffix
    if suffix and not sink.system_suffix_written:
        sink.system_suffix = ""  # the line is the ids: not them twice
        sink.write("system", suffix.strip(" []"))
        sink.system_suffix = suffix


def _span_taken(run_trace: RunTrace | None) -> Span | None:
    if run_trace is None or run_trace.span is None:
        return None
    span, run_trace.span = run_trace.span, None
    return span


@contextmanager
def finish_span(run_trace: RunTrace | None) -> Iterator[None]:
    """One run's finish (its statement and what settles in its transaction): the run's span
    ends with it, whatever the finish raises."""
    span = _span_taken(run_trace)
    if span is None or run_trace is None:
        yield
        return
    started_ns = time_ns()
    token = context_api.attach(trace.set_span_in_context(span))
    try:
        yield  # a rejected finish (a lost claim) is the run's status in its trace
    except BaseException as error:
        span.record_exception(error)
        span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
        raise
    finally:
        context_api.detach(token)
        ended_ns = time_ns()
        run_trace.events_add(span, finish_started_ns=started_ns, end_ns=ended_ns)
        span.end(end_time=ended_ns)


def finishes_traced(
    run_traces: Sequence[RunTrace | None], *, started_ns: int, accepted: Sequence[bool] | None
) -> None:
    """End the spans of a batch's runs finished together, timed over its one statement.
    `accepted` None: the statement raised (each span ends all the same)."""
    ended_ns = time_ns()
    for index, run_trace in enumerate(run_traces):
        span = _span_taken(run_trace)
        if span is None or run_trace is None:
            continue
        run_trace.events_add(span, finish_started_ns=started_ns, end_ns=ended_ns)
        if accepted is None:
            span.set_status(StatusCode.ERROR, "the batch's finish failed")
        elif not accepted[index]:
            span.set_attribute("scheduler.finish.accepted", False)
        span.end(end_time=ended_ns)
