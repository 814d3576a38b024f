"""A claimed run starts at its scheduled time, not before.

The beat rings a fire up to `SCHEDULER["FIRE_AHEAD_SECONDS"]` before it falls due (see
`beat.heap.Entry.ring_ahead`), so a worker may claim a run a little early: the
claim and the start bookkeeping are done before the run's time, and the handler starts at
it. A claim never takes a run due later than its clock tolerance, which bounds the wait.
"""

from __future__ import annotations

import threading
from datetime import datetime

from django.utils import timezone

from scheduler_app.services.claims import CLAIM_CLOCK_TOLERANCE


def seconds_until_due(scheduled_at: datetime, *, now: datetime | None = None) -> float:
    """How long to wait before starting a run scheduled at `scheduled_at` (0 when due)."""
    now = now or timezone.now()
    wait = (scheduled_at - now).total_seconds()
    return min(max(wait, 0.0), CLAIM_CLOCK_TOLERANCE.total_seconds())


def wait_until_due(scheduled_at: datetime, *, cancel_event: threading.Event | None = None) -> None:
    """Sleep until `scheduled_at`; a cancel (`cancel_event` set) ends the wait at once."""
    wait = seconds_until_due(scheduled_at)
    if wait <= 0:
        return
    if cancel_event is None:
        threading.Event().wait(wait)
    else:
        cancel_event.wait(wait)
