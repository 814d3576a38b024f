"""Celery tasks of the data lifecycle (thin: each calls one service).

The beat leader's housekeeping (`data_lifecycle.beat_hook`) enqueues them on the `bulk`
queue. Their names keep the `scheduler_app.` prefix they were registered under before this
app existed: queued messages and the housekeeping name them.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from data_lifecycle.services.retention import retention_apply
from data_lifecycle.services.stats_refresh import task_stats_refresh
from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

STATS_TASK = "scheduler_app.task_stats_refresh"
RETENTION_TASK = "scheduler_app.retention_apply"
# Longer than any sane retention run; a crashed run frees the slot after this.
RETENTION_LOCK_SECONDS = 6 * 3600

# The services are imported when a task runs: Celery imports this module in every process
# that finalizes the app (the beat and every worker), and retention pulls in pyarrow.


@shared_task(name=STATS_TASK, ignore_result=True)
def task_stats_refresh_task() -> int:
    now = timezone.now()
    # Day buckets scan a whole day: refresh them every 15 minutes, hours every time.
    return task_stats_refresh(now=now, days=now.minute % 15 == 0)


@shared_task(name=RETENTION_TASK, ignore_result=True)
def retention_apply_task() -> int:
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
