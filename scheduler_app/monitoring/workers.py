"""The worker list, read through ONE function so it can later be pointed at a worker registry
(heartbeats in the database) without touching the dashboard or /metrics.

Today it combines what Celery itself knows (a broadcast `inspect`: who answers, their pool
and process stats) with what the executions table knows (running runs and recent errors per
worker id). A worker that holds running executions but does not answer is "unresponsive".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from scheduler_app.choices import RETRYABLE_STATUSES, TERMINAL_STATUSES, ExecutionStatus
from scheduler_app.models import TaskExecution

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    state: str  # online | unresponsive
    active_runs: int
    finished_last_hour: int
    failed_last_hour: int
    pool_processes: int | None
    cpu_seconds: float | None  # user+system CPU time of the worker's main process
    max_rss_kib: int | None
    heartbeat_age_seconds: float | None  # None: no heartbeat source yet (see module doc)

    @property
    def error_rate(self) -> float | None:
        if not self.finished_last_hour:
            return None
        return self.failed_last_hour / self.finished_last_hour


# (monotonic time, replies): a broadcast waits out its whole timeout, so pages that poll
# every few seconds share one answer per WORKERS_CACHE_SECONDS in each web process.
_stats_cache: tuple[float, dict[str, dict]] | None = None


def _celery_stats() -> dict[str, dict]:
    global _stats_cache
    ttl = settings.MONITORING["WORKERS_CACHE_SECONDS"]
    if _stats_cache is not None and time.monotonic() - _stats_cache[0] < ttl:
        return _stats_cache[1]
    replies = _celery_inspect_stats()
    _stats_cache = (time.monotonic(), replies)
    return replies


def _celery_inspect_stats() -> dict[str, dict]:
    from project.celery import app

    try:
        replies = app.control.inspect(
            timeout=settings.MONITORING["INSPECT_TIMEOUT_SECONDS"]
        ).stats()
    except Exception as error:  # broker down: report no live workers rather than fail the page
        logger.warning("celery inspect failed: %s", error)
        return {}
    return replies or {}


def worker_list() -> list[WorkerInfo]:
    since = timezone.now() - timedelta(hours=1)
    stats = _celery_stats()
    by_worker = {
        row["worker_id"]: row
        for row in TaskExecution.objects.filter(
            Q(status=ExecutionStatus.RUNNING) | Q(completed_at__gte=since)
        )
        .exclude(worker_id="")
        .values("worker_id")
        .annotate(
            running=Count("id", filter=Q(status=ExecutionStatus.RUNNING)),
            finished=Count("id", filter=Q(status__in=TERMINAL_STATUSES, completed_at__gte=since)),
            failed=Count("id", filter=Q(status__in=RETRYABLE_STATUSES, completed_at__gte=since)),
        )
    }
    workers = []
    for name in sorted(set(stats) | {w for w, row in by_worker.items() if row["running"]}):
        stat = stats.get(name) or {}
        rusage = stat.get("rusage") or {}
        row = by_worker.get(name, {})
        cpu = None
        if rusage:
            cpu = float(rusage.get("utime", 0)) + float(rusage.get("stime", 0))
        workers.append(
            WorkerInfo(
                name=name,
                state="online" if name in stats else "unresponsive",
                active_runs=int(row.get("running", 0)),
                finished_last_hour=int(row.get("finished", 0)),
                failed_last_hour=int(row.get("failed", 0)),
                pool_processes=(stat.get("pool") or {}).get("max-concurrency"),
                cpu_seconds=cpu,
                max_rss_kib=rusage.get("maxrss"),
                heartbeat_age_seconds=0.0 if name in stats else None,
            )
        )
    return workers
