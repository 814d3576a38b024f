"""The "worker pool saturated" rule, which does the first steps of its runbook itself.

A tier is saturated when more runs wait for it than its scaling threshold
(FLEET_SCALE_THRESHOLD_<TIER>, the number KEDA and admin/queues scale on) while every slot
of its live workers is busy (or it has none): more workers are the only way out. The alert
then says what the runbook asks first: is autoscaling configured (alerting/autoscaling.py),
are workers rising (tier workers that joined the fleet within ALERTS_FLEET_TREND_SECONDS,
from the fleet registry), and how far past its threshold the queue is and how old its
oldest run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from alerting.autoscaling import autoscaling_status
from scheduler_app.choices import TIERS
from scheduler_app.fleet.records import STATE_ACTIVE, WorkerRecord, worker_records
from scheduler_app.monitoring.system import waiting_runs

RULE = "worker_pool_saturated"


@dataclass(frozen=True)
class Saturation:
    tier: str
    summary: str
    waiting: int


def _tier_workers(records: list[WorkerRecord], tier: str, now: float) -> list[WorkerRecord]:
    return [
        r for r in records if tier in r.queues and r.state == STATE_ACTIVE and not r.is_overdue(now)
    ]


def _rising(workers: list[WorkerRecord], now: float) -> str:
    window = settings.ALERTS["FLEET_TREND_SECONDS"]
    joined = [r for r in workers if now - r.started_at <= window]
    if joined:
        return f"yes, {len(joined)} of {len(workers)} joined in the last {window} s"
    return f"no, none joined in the last {window} s ({len(workers)} now)"


def pools_saturated(now: datetime) -> list[Saturation]:
    waiting = waiting_runs(now=now)
    records = worker_records()
    clock = now.timestamp()
    saturated = []
    for tier in TIERS:
        threshold = settings.FLEET["SCALE_THRESHOLDS"][tier]
        queue = waiting[tier]
        if queue.count <= threshold:
            continue
        workers = _tier_workers(records, tier, clock)
        slots = sum(r.concurrency for r in workers)
        busy = sum(r.active_runs for r in workers)
        if slots and busy < slots:
            continue  # free slots: the workers are catching up, not out of room
        oldest = (
            f", the oldest waiting {(now - queue.oldest_scheduled_at).total_seconds():.0f} s"
            if queue.oldest_scheduled_at
            else ""
        )
        scaling = autoscaling_status(tier)
        summary = (
            f"tier {tier}: {queue.count} runs waiting, {queue.count - threshold} over its"
            f" threshold of {threshold}{oldest}; workers at capacity ({busy}/{slots} slots busy"
            f" on {len(workers)} worker(s)); autoscaling: {scaling.detail}; workers rising:"
            f" {_rising(workers, clock)}"
        )
        saturated.append(Saturation(tier, summary, queue.count))
    return saturated
