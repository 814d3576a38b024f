"""Per-tier backlog and the scaling signal an autoscaler (or an operator) acts on.

Backlog is read from PostgreSQL (the record: queued rows, and pending rows already due,
`scheduler_app.monitoring.system.waiting_runs`), so it is right even when a doorbell was
lost; the broker's own queue length is shown next to it.
"""

from __future__ import annotations

import math
import time

import redis
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from scheduler_app.choices import TIERS, ExecutionStatus
from scheduler_app.fleet.registry import STATE_ACTIVE, worker_records
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.system import waiting_runs
from scheduler_app.redis_client import redis_from_url

# kombu's Redis transport keeps priority sub-queues under "<queue>\x06\x16<step>".
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def _broker_depths(queues: list[str]) -> dict[str, int | None]:
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    try:
        client = redis_from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for suffix in _PRIORITY_SUFFIXES:
                pipe.llen(f"{prefix}{queue}{suffix}")
        lengths = pipe.execute()
    except redis.RedisError:
        return dict.fromkeys(queues)
    step = len(_PRIORITY_SUFFIXES)
    return {q: sum(lengths[i * step : (i + 1) * step]) for i, q in enumerate(queues)}


def recommendation(*, tier: str, waiting: int, slots: int, busy: int) -> dict:
    threshold = settings.FLEET["SCALE_THRESHOLDS"][tier]
    if waiting > threshold:
        # Enough extra workers (at today's average size) to bring the backlog under it.
        per_worker = max(1, slots)
        return {
            "action": "scale_up",
            "threshold": threshold,
            "reason": f"{waiting} waiting > {threshold}",
            "suggested_extra_slots": math.ceil((waiting - threshold) / 10) or per_worker,
        }
    if waiting == 0 and slots and busy < slots / 4:
        return {
            "action": "scale_down",
            "threshold": threshold,
            "reason": f"nothing waiting and {busy}/{slots} slots busy",
        }
    return {"action": "hold", "threshold": threshold, "reason": f"{waiting} waiting"}


def tier_queue_stats() -> list[dict]:
    now = timezone.now()
    waiting = waiting_runs(now=now)
    running = dict(
        TaskExecution.platform.filter(status=ExecutionStatus.RUNNING)
        .values("queue")
        .annotate(n=Count("id"))
        .values_list("queue", "n")
    )
    broker = _broker_depths(list(TIERS))
    records = [
        r for r in worker_records() if r.state == STATE_ACTIVE and not r.is_overdue(time.time())
    ]
    stats = []
    for tier in TIERS:
        row = waiting[tier]
        consumers = [r for r in records if tier in r.queues]
        slots = sum(r.concurrency for r in consumers)
        busy = sum(r.active_runs for r in consumers)
        oldest = row.oldest_scheduled_at
        stats.append(
            {
                "tier": tier,
                "waiting": row.count,
                "oldest_waiting_seconds": round((now - oldest).total_seconds(), 3)
                if oldest
                else 0.0,
                "running": running.get(tier, 0),
                "broker_depth": broker[tier],
                "workers": len(consumers),
                "slots": slots,
                "busy_slots": busy,
                "recommendation": recommendation(
                    tier=tier, waiting=row.count, slots=slots, busy=busy
                ),
            }
        )
    return stats
