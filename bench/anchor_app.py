"""A plain Celery app for the anchors: celery-redbeat's scheduler and raw Celery throughput.

Its broker is the benchmark Redis db (REDIS_URL, set by bench.settings/support)."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("anchor", broker=os.environ["REDIS_URL"])
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    timezone="UTC",
    enable_utc=True,
    beat_max_loop_interval=1,
    redbeat_redis_url=os.environ["REDIS_URL"],
    redbeat_key_prefix="rb:",
    # redbeat's default lock (5 x max interval) expires during a long burst and the beat
    # dies with LockNotOwnedError; the fire-storm runs it with a long lock unless told not to.
    redbeat_lock_timeout=int(os.environ.get("REDBEAT_LOCK_TIMEOUT", "0")) or None,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=64,
    task_ignore_result=True,
)


@app.task(name="bench.noop")
def noop(*args, **kwargs) -> None:
    return None
