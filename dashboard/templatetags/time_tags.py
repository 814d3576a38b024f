"""Times as a person reads them: in their own zone, with UTC one hover away.

`{% local_time value %}` renders `<time datetime="<ISO, UTC>" title="… UTC">… UTC</time>`:
without script the page shows UTC and says so; app.js (`localTimes`) rewrites the text into
the browser's zone (its abbreviation shown) and leaves the UTC time in the title. One markup
for every page, so a run's times read the same on the runs list, the run page and a task's
history. `{% elapsed_since execution %}` is a running run's "running for …", ticked by
app.js from the same kind of ISO attribute (no "took" for a run that has not ended).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

from dashboard.durations import format_duration

register = template.Library()

FORMATS = {"datetime": "%Y-%m-%d %H:%M:%S", "time": "%H:%M:%S", "precise": "%Y-%m-%d %H:%M:%S.%f"}


@register.simple_tag
def local_time(value: datetime | None, style: str = "datetime", empty: str = "–"):
    """A <time> in UTC that the browser shows in its zone; `style`: datetime | time |
    precise (microseconds, the state timeline)."""
    if value is None:
        return empty
    utc = value.astimezone(UTC)
    shown = utc.strftime(FORMATS.get(style, FORMATS["datetime"]))
    full = utc.strftime(FORMATS["precise"] if style == "precise" else FORMATS["datetime"])
    return format_html(
        '<time datetime="{}" data-local="{}" title="{} UTC">{} UTC</time>',
        utc.isoformat().replace("+00:00", "Z"),
        style,
        full,
        shown,
    )


@register.simple_tag
def elapsed_since(execution) -> str:
    """A run that has not ended: "running for 12.0 s" (from its start, ticking in the
    browser), "waiting to start" before a worker took it. Never a duration: it has none."""
    if execution is None:
        return "–"
    started = getattr(execution, "started_at", None)
    if started is None:
        return "waiting to start"
    seconds = max(0.0, (timezone.now() - started).total_seconds())
    return format_html(
        '<span class="elapsed" data-running-since="{}">running for {}</span>',
        started.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        format_duration(seconds) or "0 ms",
    )


# Run states with no end yet: they have an elapsed time, never a duration.
UNENDED = ("pending", "queued", "running")


@register.simple_tag
def run_took(execution) -> str:
    """A run's duration once it ended; "running for …" while it runs; a dash when it never
    started (cancelled or skipped before a worker took it)."""
    if execution is None:
        return "–"
    if execution.status in UNENDED:
        return elapsed_since(execution)
    if execution.started_at is None or execution.completed_at is None:
        return "–"
    return format_duration((execution.completed_at - execution.started_at).total_seconds()) or "–"


def queue_wait_seconds(execution) -> float | None:
    """From when the run could start (due, and in the queue: the later of the two) to its
    start. An early claim of an 'allow' task rung ahead waits for its time: never negative."""
    if execution is None or execution.started_at is None:
        return None
    ready = execution.scheduled_at
    if execution.queued_at is not None and execution.queued_at > ready:
        ready = execution.queued_at
    return max(0.0, (execution.started_at - ready).total_seconds())


@register.filter
def queue_wait(execution) -> str:
    seconds = queue_wait_seconds(execution)
    if seconds is None:
        return "–"
    if seconds < 0.0005:
        return "none"
    return format_duration(seconds)


@register.simple_tag
def run_span(execution) -> str:
    """The run's time as a phrase: "took 2.5 s", "running for 12.0 s", "waiting to start",
    "never started" (cancelled or skipped before a worker took it)."""
    if execution is None:
        return "–"
    if execution.status in UNENDED:
        return elapsed_since(execution)
    if execution.started_at is None or execution.completed_at is None:
        return "never started"
    return f"took {run_took(execution)}"
