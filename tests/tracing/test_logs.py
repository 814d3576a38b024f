"""Trace and span ids on log records (tracing.logs): whatever handler formats a record, a
format naming the ids finds them, the current span's where it was logged."""

from __future__ import annotations

import io
import logging

import pytest

from tracing.logs import TraceIdsFilter, trace_ids_on_records
from tracing.state import tracer

FORMAT = "%(levelname)s [trace=%(trace_id)s span=%(span_id)s] %(message)s"


@pytest.fixture
def records_with_ids():
    saved = logging.getLogRecordFactory()
    trace_ids_on_records()
    trace_ids_on_records()  # once per process, however often it is called
    try:
        yield
    finally:
        logging.setLogRecordFactory(saved)


def _logger(*, with_filter: bool) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(FORMAT))
    if with_filter:
        handler.addFilter(TraceIdsFilter())
    logger = logging.getLogger(f"tests.tracing.logs.{with_filter}")
    logger.handlers = [handler]
    logger.propagate = False
    return logger, out


@pytest.mark.parametrize("with_filter", [True, False], ids=["LOGGING's handler", "Celery's"])
def test_a_line_logged_in_a_span_names_its_trace_and_span(spans, records_with_ids, with_filter):
    logger, out = _logger(with_filter=with_filter)
    logger.warning("outside")
    with tracer().start_as_current_span("work") as span:
        logger.warning("inside")
    context = span.get_span_context()
    lines = out.getvalue().splitlines()
    assert lines == [
        "WARNING [trace=- span=-] outside",
        f"WARNING [trace={context.trace_id:032x} span={context.span_id:016x}] inside",
    ]


def test_a_record_made_before_the_factory_gets_the_ids_from_the_filter(spans):
    logger, out = _logger(with_filter=True)
    with tracer().start_as_current_span("work") as span:
        logger.warning("early")
    assert f"span={span.get_span_context().span_id:016x}] early" in out.getvalue()
