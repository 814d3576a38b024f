"""What a traced run's spans leave out to cost less, and what they must still show: a step's
event only where something waited after it (`tracing.steps`, the clock injected through the
timestamps the hooks take), and the run's trace ids on the lines its log has anyway, or on
a line of their own when it has none."""

from __future__ import annotations

import uuid
from datetime import timedelta
from time import time_ns

import pytest
from django.utils import timezone

from scheduler_app.services.fire_traces import fire_spans_rung
from scheduler_app.services.firing import Fire, fires_record
from tests.factories import make_task
from tests.tracing.conftest import by_name, events_of
from tracing.state import tracer
from tracing.steps import STEP_GAP_NS, steps_events
from workers.live_logs import LiveLogSink
from workers.run_traces import (
    HandlerSpan,
    RunTrace,
    finishes_traced,
    trace_ids_log,
    trace_ids_log_end,
)


def test_a_step_has_an_event_only_when_a_step_beside_it_took_time(spans):
    span = tracer().start_span("steps")
    at = time_ns()
    gap = STEP_GAP_NS
    steps_events(
        span,
        [
            ("quick", at + 1),  # 1 ns after the start, gap - 2 before the next
            ("unset", 0),
            ("before-the-wait", at + gap - 1),  # the next step waited a whole gap
            ("after-the-wait", at + 2 * gap - 1),
            ("then-quick", at + 2 * gap),
        ],
        start_ns=at,
        end_ns=at + 2 * gap + 1,
    )
    span.end()
    (ended,) = spans.get_finished_spans()
    assert events_of(ended) == {"before-the-wait": at + gap - 1, "after-the-wait": at + 2 * gap - 1}


def test_a_span_shorter_than_the_gap_has_no_events(spans):
    span = tracer().start_span("steps")
    at = time_ns()
    steps_events(span, [("a", at + 1), ("b", at + 2)], start_ns=at, end_ns=at + STEP_GAP_NS - 1)
    span.end()
    (ended,) = spans.get_finished_spans()
    assert events_of(ended) == {}


@pytest.mark.django_db(transaction=True)
def test_a_fire_that_waited_for_its_ring_shows_when_it_was_recorded(tenant, spans):
    task = make_task(tenant, name="waited-ring", schedule={"type": "manual"})
    fire = Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=timezone.now() - timedelta(milliseconds=100),
        priority=5,
        queue=f"steps-{uuid.uuid4().hex[:8]}",
        max_attempts=1,
    )
    before = time_ns()
    (bell,) = fires_record([fire], now=timezone.now())
    recorded_by = time_ns()
    # The publisher took it 10 ms after the INSERT (the injected publish's start).
    started = recorded_by + 2 * STEP_GAP_NS
    assert fire_spans_rung([bell.execution_id], started_ns=started, ended_ns=started + 1) == {
        bell.execution_id
    }
    (fired,) = by_name(spans)["scheduler.fire"]
    steps = events_of(fired)
    assert list(steps) == ["scheduler.recorded", "scheduler.ring.started"]
    assert before <= steps["scheduler.recorded"] <= recorded_by
    assert steps["scheduler.ring.started"] == started


def test_a_run_whose_finish_waited_for_its_batch_shows_its_handlers_end(spans):
    # The first run's handler ended two gaps ago (its span began just before), and its
    # batch's finish began a gap after that; the second's handler has just ended, its
    # finish a microsecond later.
    ended = time_ns() - 2 * STEP_GAP_NS
    span = tracer().start_span("worker.run", start_time=ended - 1000)
    waited = RunTrace(None, "", span=span, handler_ended_ns=ended)
    finishes_traced([waited], started_ns=ended + STEP_GAP_NS, accepted=[True])
    now = time_ns()
    at_once = RunTrace(
        None, "", span=tracer().start_span("worker.run", start_time=now), handler_ended_ns=now
    )
    finishes_traced([at_once], started_ns=now + 1000, accepted=[True])
    first, second = spans.get_finished_spans()
    assert events_of(first) == {
        "scheduler.handler.ended": ended,
        "scheduler.finish.started": ended + STEP_GAP_NS,
    }
    assert events_of(second) == {}  # its steps all took microseconds: the span alone


def _sink() -> LiveLogSink:
    return LiveLogSink(execution_id=str(uuid.uuid4()), tenant_id=uuid.uuid4(), max_bytes=10_000)


def test_the_trace_ids_ride_on_the_runs_first_platform_line(spans):
    span = tracer().start_span("worker.run")
    context = span.get_span_context()
    ids = f"trace_id={context.trace_id:032x} span_id={context.span_id:016x}"
    sink = _sink()
    trace_ids_log(sink, HandlerSpan(span, ""))
    sink.write("stdout", "the task's own line")
    sink.write("system", "calling python handler 'noop'")
    trace_ids_log_end(sink)  # a line carried them: no line of their own
    lines = sink.buffer.text().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("the task's own line")
    assert lines[1].endswith(f"calling python handler 'noop' [{ids}]")


def test_a_run_that_wrote_no_platform_line_gets_its_trace_ids_on_a_line_of_their_own(spans):
    span = tracer().start_span("worker.run")
    context = span.get_span_context()
    sink = _sink()
    trace_ids_log(sink, HandlerSpan(span, ""))
    trace_ids_log_end(sink)  # cancelled before start: its handler wrote nothing
    (line,) = sink.buffer.text().splitlines()
    assert line.endswith(f"trace_id={context.trace_id:032x} span_id={context.span_id:016x}")


def test_an_untraced_run_has_no_trace_ids_line(spans):
    sink = _sink()
    trace_ids_log(sink, HandlerSpan(None, ""))
    trace_ids_log_end(sink)
    assert sink.buffer.text() == ""
