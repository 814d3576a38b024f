"""Alerting's chore in the beat leader's housekeeping: evaluate the alert rules now and then.

The evaluation runs on a background thread (its own database connection), so its queries
never delay a tick: firing on time matters more than alerting a second sooner. At most one
evaluation runs at a time per scheduler process.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connection

from alerting.rules import alerts_evaluate
from alerting.tasks import enqueue_incident_changes
from scheduler_app.housekeeping import Chore, chore_register

logger = logging.getLogger(__name__)

_last_start: float | None = None
_running: threading.Thread | None = None


def _evaluate() -> None:
    try:
        enqueue_incident_changes(alerts_evaluate())
    except Exception:  # alerting must never take the scheduler down
        logger.exception("alert evaluation failed")
    finally:
        connection.close()


def alerts_evaluate_if_due() -> threading.Thread | None:
    """Start an evaluation when the interval has passed; returns its thread (for tests)."""
    global _last_start, _running
    if _running is not None and _running.is_alive():
        return None
    interval = settings.ALERTS["EVALUATE_SECONDS"]
    if _last_start is None:
        # A scheduler that just took the lead first catches up on overdue fires; judging
        # "missed schedules" before one interval has passed would raise false alarms.
        _last_start = time.monotonic()
        return None
    if time.monotonic() - _last_start < interval:
        return None
    _last_start = time.monotonic()
    _running = threading.Thread(target=_evaluate, name="alerts-evaluate", daemon=True)
    _running.start()
    return _running


def alerts_evaluation_wait(timeout: float | None = None) -> None:
    """Wait for a background evaluation under way, if any (a test's database teardown must
    not race it, nor a process that stops on purpose)."""
    running = _running
    if running is not None and running.is_alive():
        running.join(timeout)


def chores_register() -> None:
    chore_register(Chore("alerts-evaluate", lambda now: alerts_evaluate_if_due()))
