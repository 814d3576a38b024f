"""The data-lifecycle part of the beat leader's housekeeping.

Kept cheap because it runs inside the firing loop: creating next months' partitions is a
little DDL at most once per PARTITION_CHECK_SECONDS (and on the first call); retention and the
statistics refresh, which scan data, are handed to a `bulk` worker as Celery tasks.
Nothing here may break firing: every failure is logged and retried on the next period.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from celery import current_app
from django.conf import settings

from data_lifecycle.tasks import RETENTION_TASK, STATS_TASK
from scheduler_app.housekeeping import Chore, chore_register
from scheduler_app.partitions import partitions_ensure

logger = logging.getLogger(__name__)

MAINTENANCE_QUEUE = "bulk"

_last_run: dict[str, float] = {}


def _due(job: str, period: float) -> bool:
    if period <= 0:
        return False
    last = _last_run.get(job)
    if last is not None and time.monotonic() - last < period:
        return False
    _last_run[job] = time.monotonic()
    return True


def data_lifecycle_tick(*, now: datetime) -> None:
    config = settings.LIFECYCLE
    if _due("partitions", config["PARTITION_CHECK_SECONDS"]):
        try:
            created = partitions_ensure(now=now, months_ahead=config["PARTITION_MONTHS_AHEAD"])
            if created:
                logger.info("created execution partitions %s", ", ".join(created))
        except Exception:
            _last_run.pop("partitions", None)
            logger.exception("could not create execution partitions; retrying next housekeeping")
    for job, task, period in (
        ("stats", STATS_TASK, config["STATS_REFRESH_SECONDS"]),
        ("retention", RETENTION_TASK, config["RETENTION_RUN_SECONDS"]),
    ):
        if _due(job, period):
            try:
                _send(task)
            except Exception:
                logger.exception("could not enqueue %s", task)


def _send(task_name: str) -> None:
    current_app.send_task(task_name, queue=MAINTENANCE_QUEUE, routing_key=MAINTENANCE_QUEUE)


def chores_register() -> None:
    chore_register(Chore("data-lifecycle", lambda now: data_lifecycle_tick(now=now)))
