"""Prometheus exposition, computed at scrape time from PostgreSQL and Redis.

Nothing here counts in the web process's memory: run counters and histograms come from
Redis (written by the workers, see counters.py), scheduler state from the nodes' Redis
status, everything else from the database. So any web replica answers the same numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from scheduler_app.choices import ACTIVE_STATUSES
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.monitoring import counters, system
from scheduler_app.monitoring.flow import flow_metrics
from scheduler_app.monitoring.stats import late_start_count
from scheduler_app.monitoring.workers import WORKER_STATES, worker_list
from scheduler_app.services.retry_budget import retry_budget_usage

# Every metric this module exposes; the alert rules and the Grafana board are tested against it.
METRIC_NAMES = (
    "scheduler_runs_total",
    "scheduler_schedule_lag_seconds",
    "scheduler_run_duration_seconds",
    "scheduler_node_fires_total",
    "scheduler_node_published_total",
    "scheduler_queue_depth",
    "scheduler_queue_oldest_age_seconds",
    "scheduler_runs_waiting",
    "scheduler_executions_active",
    "scheduler_workers",
    "scheduler_dead_letters",
    "scheduler_leader",
    "scheduler_leader_epoch",
    "scheduler_leaders",
    "scheduler_missed_fires",
    "scheduler_flow_running",
    "scheduler_flow_waiting",
    "scheduler_retry_budget",
    "scheduler_budget_refusals_total",
    "scheduler_notifications_dropped_total",
    "scheduler_runs_lost_total",
    "scheduler_scrape_errors",
)

SCRAPE_SOURCES = (
    "redis_counters",
    "redis_scheduler",
    "broker",
    "database",
    "registry",
    "retry_budget",
)


class SchedulerCollector:
    def collect(self) -> Iterator[Metric]:
        errors = Counter()
        # PostgreSQL down is a scrape that says so (scheduler_scrape_errors{source="database"},
        # alert SchedulerDatabaseUnavailable), not a failed scrape that says nothing: every
        # section that reads it (a queue's oldest message too) counts there, and the others
        # are still exposed.
        try:
            slugs = {str(k): v for k, v in Tenant.objects.values_list("id", "slug")}
        except DatabaseError:
            errors["database"] = 1
            slugs = {}
        sections: list[tuple[str, Callable[[], Iterator[Metric]]]] = [
            ("redis_counters", lambda: self._run_counters(slugs)),
            ("redis_scheduler", self._scheduler_nodes),
            ("broker", self._queues),
            ("database", lambda: self._database(slugs)),
            ("registry", self._workers),
            ("retry_budget", self._retry_budget),
        ]
        for source, section in sections:
            if source == "database" and errors["database"]:
                continue
            try:
                yield from section()
            except redis.RedisError:
                errors[source] += 1
            except DatabaseError:
                errors["database"] = 1  # one source, however many sections read it
        scrape = GaugeMetricFamily(
            "scheduler_scrape_errors", "Sources that could not be read", labels=["source"]
        )
        for source in SCRAPE_SOURCES:
            scrape.add_metric([source], errors[source])
        yield scrape

    def _run_counters(self, slugs: dict[str, str]) -> Iterator[Metric]:
        runs = CounterMetricFamily(
            "scheduler_runs", "Finished runs (attempts)", labels=["tenant", "tier", "status"]
        )
        for (tenant_id, tier, status), value in sorted(counters.read_runs().items()):
            runs.add_metric([slugs.get(tenant_id, tenant_id), tier, status], value)
        yield runs
        refusals = CounterMetricFamily(
            "scheduler_budget_refusals",
            "Requests refused because a tenant's budget was spent (log search time or "
            "concurrency, payload size or bytes per hour)",
            labels=["tenant", "budget"],
        )
        for (tenant_id, budget), value in sorted(counters.read_budget_refusals().items()):
            refusals.add_metric([slugs.get(tenant_id, tenant_id), budget], value)
        yield refusals
        dropped = CounterMetricFamily(
            "scheduler_notifications_dropped",
            "Notifications not sent, with the reason (a tenant's mail over its hourly rate)",
            labels=["tenant", "kind", "reason"],
        )
        for (tenant_id, kind, reason), value in sorted(
            counters.read_notifications_dropped().items()
        ):
            dropped.add_metric([slugs.get(tenant_id, tenant_id), kind, reason], value)
        yield dropped
        lost = CounterMetricFamily(
            "scheduler_runs_lost",
            "Runs whose worker died while they ran: requeued (the same attempt) or failed "
            "(worker_lost, WORKER_LOST_REQUEUES spent)",
            labels=["tenant", "tier", "outcome"],
        )
        for (tenant_id, tier, outcome), value in sorted(counters.read_runs_lost().items()):
            lost.add_metric([slugs.get(tenant_id, tenant_id), tier, outcome], value)
        yield lost
        for kind, name, text in (
            ("lag", "scheduler_schedule_lag_seconds", "Start time minus scheduled time"),
            ("duration", "scheduler_run_duration_seconds", "Run duration, start to finish"),
        ):
            family = HistogramMetricFamily(name, text, labels=["tier"])
            for tier, histogram in counters.read_histograms(kind).items():
                family.add_metric([tier], histogram.buckets, histogram.total)
            yield family

    def _scheduler_nodes(self) -> Iterator[Metric]:
        nodes = system.scheduler_nodes()
        leader = system.leader_node(nodes)
        fires = CounterMetricFamily(
            "scheduler_node_fires", "Fires recorded by a scheduler process", labels=["node"]
        )
        published = CounterMetricFamily(
            "scheduler_node_published", "Doorbells published by a scheduler", labels=["node"]
        )
        is_leader = GaugeMetricFamily("scheduler_leader", "1 on the leader", labels=["node"])
        epoch = GaugeMetricFamily(
            "scheduler_leader_epoch", "Fencing epoch of the leader lock", labels=["node"]
        )
        for node in nodes:
            fires.add_metric([node.node], node.fired_total)
            published.add_metric([node.node], node.published_total)
            is_leader.add_metric([node.node], 1 if leader and leader.node == node.node else 0)
            if node.epoch is not None:
                epoch.add_metric([node.node], node.epoch)
        yield from (fires, published, is_leader, epoch)
        yield GaugeMetricFamily(
            "scheduler_leaders",
            "Schedulers reporting as leader right now",
            value=1 if leader else 0,
        )

    def _queues(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("scheduler_queue_depth", "Messages waiting", labels=["tier"])
        age = GaugeMetricFamily(
            "scheduler_queue_oldest_age_seconds", "Age of the oldest message", labels=["tier"]
        )
        for state in system.queue_states():
            depth.add_metric([state.tier], state.depth)
            age.add_metric([state.tier], state.oldest_age_seconds or 0.0)
        yield depth
        yield age

    def _database(self, slugs: dict[str, str]) -> Iterator[Metric]:
        now = timezone.now()
        # Runs, not messages (scheduler_queue_depth counts doorbells, and one rings several
        # runs): what KEDA scales each worker tier on (deploy/kubernetes/keda.yaml).
        waiting = GaugeMetricFamily(
            "scheduler_runs_waiting",
            "Runs waiting for a worker (queued, or pending and due), from the database",
            labels=["tier"],
        )
        for tier, runs in system.waiting_runs(now=now).items():
            waiting.add_metric([tier], runs.count)
        yield waiting
        active = GaugeMetricFamily(
            "scheduler_executions_active", "Executions not finished", labels=["status"]
        )
        counts = dict(
            TaskExecution.platform.filter(status__in=ACTIVE_STATUSES)
            .values_list("status")
            .annotate(n=Count("id"))
        )
        for status in ACTIVE_STATUSES:
            active.add_metric([status], counts.get(status, 0))
        yield active
        dead = GaugeMetricFamily(
            "scheduler_dead_letters", "Executions in the dead-letter queue", labels=["tenant"]
        )
        for tenant_id, n in (
            TaskExecution.platform.filter(dead_lettered=True)
            .values_list("tenant_id")
            .annotate(n=Count("id"))
        ):
            dead.add_metric([slugs.get(str(tenant_id), str(tenant_id))], n)
        yield dead
        grace = settings.MONITORING["MISSED_GRACE_SECONDS"]
        missed = GaugeMetricFamily(
            "scheduler_missed_fires",
            "overdue_schedules: schedulable tasks whose next fire is past due by more than the"
            " grace; late_starts_1h: fires of the last hour that started late or not at all",
            labels=["kind"],
        )
        overdue = TaskDefinition.platform.filter(
            enabled=True,
            paused=False,
            deleted_at__isnull=True,
            next_fire_at__lt=now - timedelta(seconds=grace),
        ).count()
        missed.add_metric(["overdue_schedules"], overdue)
        missed.add_metric(
            ["late_starts_1h"],
            late_start_count(since=now - timedelta(hours=1), grace_seconds=grace),
        )
        yield missed
        yield from flow_metrics(slugs)

    def _workers(self) -> Iterator[Metric]:
        states = Counter(worker.state for worker in worker_list())
        workers = GaugeMetricFamily(
            "scheduler_workers",
            "Workers in the fleet registry by state (unresponsive: heartbeats stopped, not yet"
            " declared dead; dead and gone stay listed for an hour)",
            labels=["state"],
        )
        for state in WORKER_STATES:
            workers.add_metric([state], states.get(state, 0))
        yield workers

    def _retry_budget(self) -> Iterator[Metric]:
        # The budget is fleet-wide (retries may be a share of all starts per minute), so the
        # gauge has no tenant label: kind = started | retries | allowance, this minute.
        usage = retry_budget_usage(now=timezone.now())
        budget = GaugeMetricFamily(
            "scheduler_retry_budget",
            "Retry budget of the current minute: executions started, retries admitted, and"
            " the retries allowed",
            labels=["kind"],
        )
        budget.add_metric(["started"], usage["executions_this_minute"])
        budget.add_metric(["retries"], usage["retries_this_minute"])
        budget.add_metric(["allowance"], usage["retry_allowance_this_minute"])
        yield budget
