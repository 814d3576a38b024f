"""Celery tasks of the scheduler app (thin: each calls one service).

The notification tasks live with alerting; maintenance tasks (statistics, retention) are
enqueued by the beat leader on the `bulk` queue.
"""

from __future__ import annotations

import logging

from celery import shared_task

from scheduler_app.alerting.tasks import deliver_notification, run_notifications
from scheduler_app.redis_client import get_redis, redis_key

__all__ = [
    "deliver_notification",
    "retention_apply_task",
    "run_notifications",
    "task_stats_refresh_task",
]

logger = logging.getLogger(__name__)

# Longer than any sane retention run; a crashed run frees the slot after this.
RETENTION_LOCK_SECONDS = 6 * 3600


@shared_task(name="scheduler_app.task_stats_refresh", ignore_result=True)
def task_stats_refresh_task() -> int:
    from django.utils import timezone

    from scheduler_app.lifecycle.stats_refresh import task_stats_refresh

    now = timezone.now()
    # Day buckets scan a whole day: refresh them every 15 minutes, hours every time.
    return task_stats_refresh(now=now, days=now.minute % 15 == 0)


@shared_task(name="scheduler_app.retention_apply", ignore_result=True)
def retention_apply_task() -> int:
    from scheduler_app.lifecycle.retention import retention_apply

    client = get_redis()
    key = redis_key("lifecycle:retention-running")
    if not client.set(key, "1", nx=True, ex=RETENTION_LOCK_SECONDS):
        logger.info("retention already running elsewhere; skipped")
        return 0
    try:
        report = retention_apply()
    finally:
        client.delete(key)
    if report.rows:
        logger.info("retention archived %d rows in %d files", report.rows, len(report.files))
    return report.rows
