"""Latency and success of one task or one DAG over a window, from the stats buckets.

    task_latency(tenant=t, task_id=..., window=timedelta(days=7), bucket="hour", now=...)
    dag_latency(tenant=t, dag_id=..., window=..., bucket="day", now=...)
        -> {"since", "until", "bucket",
            "totals": {"count", "by_status", "success_rate",
                       "duration": {"p50", "p95", "p99"}, "lag": {"p50", "p95", "p99"}},
            "series": [{"start", same keys as totals}, one per bucket, oldest first,
                       empty buckets included with count 0 and null percentiles]}

Seconds, within 1% (`latency_sketch`): the window's percentiles are read from the sum of its
buckets' histograms, never averaged. Only the tenant's own rows are read (the caller has
already resolved the task or DAG in the tenant: another tenant's id is its 404).
The buckets are those that overlap [now - window, now): the first may start before.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from data_lifecycle.latency_sketch import sketch_merge, sketch_quantiles
from data_lifecycle.models import DagStats, StatsBucket, TaskStats
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import Tenant

BUCKET_STEP = {StatsBucket.HOUR: timedelta(hours=1), StatsBucket.DAY: timedelta(days=1)}
# The longest window each bucket size answers (a chart of at most 336 hours or 400 days).
MAX_WINDOW = {StatsBucket.HOUR: timedelta(days=14), StatsBucket.DAY: timedelta(days=400)}
WINDOW_PATTERN = re.compile(r"([1-9][0-9]{0,4})([hd])")
DEFAULT_WINDOW = "7d"
# The statuses a success rate is out of (cancelled and unfinished runs are neither).
TASK_FINISHED = ("success", "failed", "timed_out")
DAG_FINISHED = ("success", "failed", "partially_completed")
FIELDS = ("bucket_start", "by_status", "duration_sketch", "lag_sketch")


def stats_query(*, window: str | None, bucket: str | None) -> tuple[timedelta, str]:
    """The window (`24h`, `7d`: hours or days) and the bucket size (`hour`, `day`) of a
    stats request; a ValidationFailed naming the field otherwise. Without a bucket, hours
    up to 2 days, days beyond."""
    window = DEFAULT_WINDOW if window in (None, "") else window
    match = WINDOW_PATTERN.fullmatch(window)
    if match is None:
        raise ValidationFailed(
            "window must be a number of hours or days, e.g. 24h or 7d", field="window"
        )
    number, unit = int(match.group(1)), match.group(2)
    span = timedelta(hours=number) if unit == "h" else timedelta(days=number)
    if bucket in (None, ""):
        bucket = StatsBucket.HOUR if span <= timedelta(days=2) else StatsBucket.DAY
    if bucket not in BUCKET_STEP:
        raise ValidationFailed(f"bucket must be one of {', '.join(BUCKET_STEP)}", field="bucket")
    if span > MAX_WINDOW[bucket]:
        longest = MAX_WINDOW[bucket].days
        raise ValidationFailed(
            f"window is too long for {bucket} buckets: at most {longest}d", field="window"
        )
    return span, str(bucket)


def task_latency(
    *,
    tenant: Tenant,
    task_id: uuid.UUID | str,
    window: timedelta,
    bucket: str,
    now: datetime,
) -> dict[str, Any]:
    rows = TaskStats.objects.filter(tenant_id=tenant.id, task_id=task_id)
    return _latency(rows, window=window, bucket=bucket, now=now, finished=TASK_FINISHED)


def dag_latency(
    *,
    tenant: Tenant,
    dag_id: uuid.UUID | str,
    window: timedelta,
    bucket: str,
    now: datetime,
) -> dict[str, Any]:
    rows = DagStats.objects.filter(tenant_id=tenant.id, dag_id=dag_id)
    return _latency(rows, window=window, bucket=bucket, now=now, finished=DAG_FINISHED)


def bucket_floor(moment: datetime, bucket: str) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == StatsBucket.DAY else moment


def _latency(
    rows: Any, *, window: timedelta, bucket: str, now: datetime, finished: tuple[str, ...]
) -> dict[str, Any]:
    if bucket not in BUCKET_STEP:
        raise ValueError(f"bucket must be one of {', '.join(BUCKET_STEP)}")
    since = now - window
    first = bucket_floor(since, bucket)
    found = {
        row["bucket_start"]: row
        for row in rows.filter(bucket=bucket, bucket_start__gte=first, bucket_start__lt=now)
        .order_by("bucket_start")
        .values(*FIELDS)
    }
    series = []
    start = first
    while start < now:
        row = found.get(start)
        series.append({"start": start, **_summary([row] if row else [], finished)})
        start += BUCKET_STEP[bucket]
    return {
        "since": since,
        "until": now,
        "bucket": bucket,
        "totals": _summary(found.values(), finished),
        "series": series,
    }


def _summary(rows: Iterable[dict[str, Any]], finished: tuple[str, ...]) -> dict[str, Any]:
    rows = list(rows)
    by_status = sketch_merge(row["by_status"] for row in rows)
    done = sum(by_status.get(status, 0) for status in finished)
    return {
        "count": sum(by_status.values()),
        "by_status": by_status,
        "success_rate": round(by_status.get("success", 0) / done, 4) if done else None,
        "duration": sketch_quantiles(sketch_merge(row["duration_sketch"] for row in rows)),
        "lag": sketch_quantiles(sketch_merge(row["lag_sketch"] for row in rows)),
    }
