"""Whether tracing is on: the one cheap check every hook on the run path makes first.

The tracer is held here rather than asked of OpenTelemetry's global provider: the global one
can be set only once per process, and tests start and stop tracing around each case.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.trace import Tracer

_tracer: Tracer | None = None
_before_stop: list[Callable[[], None]] = []


def tracer() -> Tracer | None:
    """The platform's tracer while tracing is on, else None (no provider, no per-run work)."""
    return _tracer


def tracer_set(value: Tracer | None) -> None:
    global _tracer  # the process-wide switch, set at start and stop
    _tracer = value


def before_stop_call(hook: Callable[[], None]) -> None:
    """Have `hook` run as tracing stops, before the last flush: for spans a module holds open
    (the fires awaiting their ring), to end them while they can still be exported."""
    _before_stop.append(hook)


def before_stop_run() -> None:
    for hook in _before_stop:
        hook()
