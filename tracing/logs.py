"""Trace and span ids on the platform's log lines: `trace_id` and `span_id` on every log
record of a process while tracing is on, for the formats that name them (LOGGING's, Celery's
CELERY_WORKER_LOG_FORMAT)."""

from __future__ import annotations

import logging

from opentelemetry import trace


def trace_ids_set(record: logging.LogRecord) -> None:
    """The current span's ids (32 and 16 hex digits), or "-" outside a span."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        record.trace_id = f"{context.trace_id:032x}"
        record.span_id = f"{context.span_id:016x}"
    else:
        record.trace_id = record.span_id = "-"


def trace_ids_on_records() -> None:
    """Every record made from now on carries the ids of the span current where it was
    logged, whichever handler formats it: Celery's worker and beat replace the handlers
    LOGGING made with their own, its task logger has its own, and a handler without the
    fields would fail on a format that names them. Once per process."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "adds_trace_ids", False):
        return

    def record_with_trace_ids(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        trace_ids_set(record)
        return record

    record_with_trace_ids.adds_trace_ids = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(record_with_trace_ids)


def trace_ids_filter_install(logger: logging.Logger) -> None:
    """The filter on every handler of `logger` (Celery's, when `celery worker` or `celery
    beat` sets its logging up): a record made before `trace_ids_on_records` (while the
    process was starting) gets the fields when it is handled."""
    for handler in logger.handlers:
        if not any(isinstance(existing, TraceIdsFilter) for existing in handler.filters):
            handler.addFilter(TraceIdsFilter())


class TraceIdsFilter(logging.Filter):
    """Adds `trace_id` and `span_id` to a record that has none yet (the `trace_ids` filter of
    LOGGING). Installed only while tracing is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            trace_ids_set(record)
        return True
