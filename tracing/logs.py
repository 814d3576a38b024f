"""Trace and span ids on the platform's log lines (the `trace_ids` filter of LOGGING)."""

from __future__ import annotations

import logging

from opentelemetry import trace


class TraceIdsFilter(logging.Filter):
    """Adds `trace_id` and `span_id` to every record: the current span's, or "-" outside
    one, so a format string may always name them. Installed only while tracing is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = f"{context.trace_id:032x}"
            record.span_id = f"{context.span_id:016x}"
        else:
            record.trace_id = record.span_id = "-"
        return True
