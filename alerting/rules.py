"""The alert rules of deploy/prometheus/alerts.yml, evaluated by the system itself so that an
installation without Prometheus is told too. Called from the leader's housekeeping (throttled).

Each rule yields the keys that are firing now with a summary; keys that were open and are no
longer firing are resolved. Rules without an in-app twin: "no leader" (the evaluator IS the
leader; Prometheus and /readyz/scheduler cover it) and "database unavailable" (the
evaluator could record nothing; Prometheus covers it). Each rule's runbook is named in
alerting/runbooks.py; "worker pool saturated" and "leader failover" do their runbook's first
checks themselves and say the result (alerting/saturation.py, alerting/failover.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, F, Q
from django.utils import timezone

from alerting.failover import RULE as FAILOVER_RULE
from alerting.failover import leader_failovers
from alerting.models import AlertIncident
from alerting.saturation import RULE as SATURATION_RULE
from alerting.saturation import pools_saturated
from alerting.services.incidents import (
    incident_open,
    incident_resolve,
    incidents_open_keys,
    incidents_renotify_due,
)
from alerting.services.quota_alerts import RULE as QUOTA_RULE
from alerting.services.quota_alerts import quotas_breached
from alerting.services.sla import RULE as SLA_RULE
from alerting.services.sla import sla_missed
from scheduler_app.choices import RETRYABLE_STATUSES, TERMINAL_STATUSES, ExecutionStatus
from scheduler_app.models import ExecutionLoss, TaskDefinition, TaskExecution, Tenant
from scheduler_app.monitoring.system import queue_states
from scheduler_app.monitoring.workers import STATE_UNRESPONSIVE, worker_list

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Firing:
    key: str
    summary: str
    value: float
    tenant_id: object | None = None
    # Where the rule's check raised it above the rule's own (a failover onto a database
    # that refuses writes pages).
    severity: str | None = None


def _hourly_outcomes(now: datetime) -> list[dict]:
    """Per tenant: finished runs of the last hour, failed and successful ones (enough runs
    to judge a rate only)."""
    rows = (
        TaskExecution.platform.filter(
            scheduled_at__gte=now - timedelta(hours=1), status__in=TERMINAL_STATUSES
        )
        .values("tenant_id")
        .annotate(
            total=Count("id"),
            failed=Count("id", filter=Q(status__in=RETRYABLE_STATUSES)),
            success=Count("id", filter=Q(status=ExecutionStatus.SUCCESS)),
        )
    )
    return [row for row in rows if row["total"] >= settings.ALERTS["MIN_RUNS_FOR_RATE"]]


def _error_rates(now: datetime) -> list[Firing]:
    threshold = settings.ALERTS["ERROR_RATE_THRESHOLD"]
    firing = []
    for row in _hourly_outcomes(now):
        rate = row["failed"] / row["total"]
        if rate > threshold:
            summary = (
                f"{rate:.1%} of {row['total']} runs in the last hour failed"
                f" (threshold {threshold:.0%}); success rate {row['success'] / row['total']:.1%}"
            )
            firing.append(Firing(str(row["tenant_id"]), summary, rate, row["tenant_id"]))
    return firing


def _success_rates(now: datetime) -> list[Firing]:
    """Twin of SchedulerSuccessRateLow: cancelled, skipped and timed-out runs count against
    the success rate too, so it can fire while the error rate does not."""
    threshold = settings.ALERTS["SUCCESS_RATE_THRESHOLD"]
    firing = []
    for row in _hourly_outcomes(now):
        rate = row["success"] / row["total"]
        if rate < threshold:
            summary = (
                f"success rate {rate:.1%} over {row['total']} runs in the last hour"
                f" (threshold {threshold:.0%})"
            )
            firing.append(Firing(str(row["tenant_id"]), summary, rate, row["tenant_id"]))
    return firing


def _missed_schedules(now: datetime) -> list[Firing]:
    grace = timedelta(seconds=settings.MONITORING["MISSED_GRACE_SECONDS"])
    late = Q(started_at__gt=F("scheduled_at") + grace)
    never = Q(started_at__isnull=True, scheduled_at__lt=now - grace)
    late_rows = (
        TaskExecution.platform.filter(
            scheduled_at__gte=now - timedelta(minutes=15), trigger="schedule", attempt=1
        )
        .filter(late | never)
        .exclude(status__in=[ExecutionStatus.CANCELLED, ExecutionStatus.SKIPPED])
        .values("task_id", "tenant_id", "task__name")
        .annotate(n=Count("id"))
    )
    overdue = TaskDefinition.platform.filter(
        enabled=True, paused=False, deleted_at__isnull=True, next_fire_at__lt=now - grace
    ).values("id", "tenant_id", "name")[:1000]
    firing: dict[str, Firing] = {}
    for row in late_rows:
        firing[str(row["task_id"])] = Firing(
            str(row["task_id"]),
            f"task {row['task__name']}: {row['n']} fire(s) in the last 15 min started late"
            " or not at all",
            row["n"],
            row["tenant_id"],
        )
    for row in overdue:
        firing.setdefault(
            str(row["id"]),
            Firing(
                str(row["id"]),
                f"task {row['name']}: its next fire is overdue (the scheduler is not firing it)",
                1,
                row["tenant_id"],
            ),
        )
    return list(firing.values())


def _queue_depth(now: datetime) -> list[Firing]:
    threshold = settings.ALERTS["QUEUE_DEPTH_THRESHOLD"]
    return [
        Firing(state.tier, f"queue {state.tier} holds {state.depth} messages", state.depth)
        for state in queue_states(now=now)
        if state.depth > threshold
    ]


def _dead_workers(now: datetime) -> list[Firing]:
    """Twin of SchedulerDeadWorker (the registry says unresponsive or dead), plus workers
    that lost runs in the last 10 minutes (each loss, re-queued or failed `worker_lost`, is
    an ExecutionLoss naming the worker: a hung worker's registry entry may look alive)."""
    firing = {
        worker.name: Firing(
            worker.name,
            f"worker {worker.name} stopped heartbeating ({worker.state},"
            f" last heartbeat {worker.heartbeat_age_seconds:.0f} s ago)",
            worker.heartbeat_age_seconds,
        )
        for worker in worker_list()
        if worker.state in (STATE_UNRESPONSIVE, "dead")
    }
    rows = (
        ExecutionLoss.platform.filter(lost_at__gte=now - timedelta(minutes=10))
        .exclude(worker_id="")
        .values("worker_id")
        .annotate(n=Count("id"))
    )
    for row in rows:
        firing.setdefault(
            row["worker_id"],
            Firing(
                row["worker_id"],
                f"worker {row['worker_id']} stopped renewing leases: {row['n']} run(s) lost",
                row["n"],
            ),
        )
    return list(firing.values())


def _sla_missed(now: datetime) -> list[Firing]:
    return [
        Firing(
            key=late["key"],
            summary=late["summary"],
            value=late["late_seconds"],
            tenant_id=late["tenant_id"],
        )
        for late in sla_missed(now)
    ]


def _quota_breached(now: datetime) -> list[Firing]:
    return [
        Firing(key=b["key"], summary=b["summary"], value=b["usage"], tenant_id=b["tenant_id"])
        for b in quotas_breached(now)
    ]


def _pools_saturated(now: datetime) -> list[Firing]:
    return [Firing(s.tier, s.summary, s.waiting) for s in pools_saturated(now)]


def _leader_failovers(now: datetime) -> list[Firing]:
    return [
        Firing(f.key, f.summary, f.age_seconds, severity=None if f.writes_answered else "critical")
        for f in leader_failovers(now)
    ]


RULES: dict[str, tuple[str, Callable[[datetime], list[Firing]]]] = {
    "error_rate_high": ("warning", _error_rates),
    "success_rate_low": ("warning", _success_rates),
    "missed_schedule": ("critical", _missed_schedules),
    # The design document: a queue depth over 10,000 pages.
    "queue_depth_high": ("critical", _queue_depth),
    "dead_worker": ("critical", _dead_workers),
    SATURATION_RULE: ("warning", _pools_saturated),
    FAILOVER_RULE: ("warning", _leader_failovers),
    SLA_RULE: ("warning", _sla_missed),
    QUOTA_RULE: ("warning", _quota_breached),
}


def alerts_evaluate(*, now: datetime | None = None) -> list[tuple[AlertIncident, bool]]:
    """Open what started firing, resolve what stopped, re-announce what still fires unacknowledged.
    Returns (incident, resolved) changes."""
    now = now or timezone.now()
    changes: list[tuple[AlertIncident, bool]] = []
    tenants = {str(t.id): t for t in Tenant.objects.all()}
    for rule, (severity, evaluate) in RULES.items():
        try:
            firing = evaluate(now)
        except Exception:  # one broken source must not silence the other rules
            logger.exception("alert rule %s could not be evaluated", rule)
            continue
        open_keys = incidents_open_keys(rule=rule)
        for item in firing:
            tenant = tenants.get(str(item.tenant_id)) if item.tenant_id else None
            opened = incident_open(
                rule=rule,
                key=item.key,
                summary=item.summary,
                tenant=tenant,
                value=item.value,
                severity=item.severity or severity,
            )
            if opened is not None:
                changes.append((opened, False))
        # Still firing and nobody acknowledged it: announced again (an acknowledged one stays
        # quiet until it resolves).
        still = open_keys & {item.key for item in firing}
        for reminded in incidents_renotify_due(rule=rule, keys=still, now=now):
            changes.append((reminded, False))
        for key in open_keys - {item.key for item in firing}:
            resolved = incident_resolve(rule=rule, key=key)
            if resolved is not None:
                changes.append((resolved, True))
    return changes
