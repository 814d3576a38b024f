"""Plain Celery tasks for the anchors: record when each ran, nothing else.

Loaded into the benchmark's worker with `--include bench.celery_tasks`.
"""

from __future__ import annotations

import time

from celery import shared_task


def _record(key: str, index: int, started: float) -> None:
    from scheduler_app.redis_client import get_redis

    get_redis().hset(key, str(index), f"{started}:{time.time()}")


@shared_task(name="bench.plain_step", ignore_result=False)
def plain_step(key: str, index: int) -> int:
    _record(key, index, time.time())
    return index


@shared_task(name="bench.plain_done", ignore_result=True)
def plain_done(key: str) -> None:
    _record(key, -1, time.time())
