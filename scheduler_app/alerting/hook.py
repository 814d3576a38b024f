"""The one call the scheduler's housekeeping makes: evaluate the alert rules now and then."""

from __future__ import annotations

import logging
import time

from django.conf import settings

logger = logging.getLogger(__name__)

_last_run = 0.0


def alerts_evaluate_if_due() -> None:
    global _last_run
    if time.monotonic() - _last_run < settings.ALERTS["EVALUATE_SECONDS"]:
        return
    _last_run = time.monotonic()
    from scheduler_app.alerting.rules import alerts_evaluate
    from scheduler_app.alerting.tasks import enqueue_incident_changes

    try:
        enqueue_incident_changes(alerts_evaluate())
    except Exception:  # alerting must never stop the scheduler from firing
        logger.exception("alert evaluation failed")
