"""The flow-control gauges of /metrics: per limit, what runs and what waits. A key is tenant
data of unbounded variety (a customer id), so the label set is capped: the FLOW_METRIC_KEYS
busiest (tenant, kind, key) series are shown and the rest are summed into key="_other" per
tenant and kind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from django.db import connection
from prometheus_client.core import GaugeMetricFamily

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution

FLOW_METRIC_KEYS = 50
_KIND_OF_PREFIX = {"c": "concurrency", "p": "pool"}
OTHER = "_other"


def flow_usage() -> tuple[Counter, Counter]:
    """(running, waiting) counts by (tenant id, kind, key)."""
    table = TaskExecution._meta.db_table
    running: Counter = Counter()
    waiting: Counter = Counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT h.key, sum(h.value::int) FROM {table} e, jsonb_each_text(e.flow_holds) h "  # noqa: S608
            "WHERE e.status = %s AND e.flow_holds IS NOT NULL GROUP BY h.key",
            [ExecutionStatus.RUNNING.value],
        )
        for counter_key, held in cursor.fetchall():
            prefix, tenant_id, key = counter_key.split(":", 2)
            running[(tenant_id, _KIND_OF_PREFIX.get(prefix, prefix), key)] += int(held)
        cursor.execute(
            f"SELECT tenant_id, waiting_for ->> 'kind', waiting_for ->> 'key', count(*) "  # noqa: S608
            f"FROM {table} WHERE status = %s AND waiting_for IS NOT NULL GROUP BY 1, 2, 3",
            [ExecutionStatus.PENDING.value],
        )
        for tenant_id, kind, key, count in cursor.fetchall():
            waiting[(str(tenant_id), kind, key)] += int(count)
    return running, waiting


def flow_metrics(slugs: dict[str, str]) -> Iterator[GaugeMetricFamily]:
    running, waiting = flow_usage()
    busiest = sorted(
        set(running) | set(waiting), key=lambda series: -(running[series] + waiting[series])
    )
    shown = set(busiest[:FLOW_METRIC_KEYS])
    families = {
        "running": GaugeMetricFamily(
            "scheduler_flow_running",
            "Slots held by running runs, per flow-control limit (concurrency key or pool)",
            labels=["tenant", "kind", "key"],
        ),
        "waiting": GaugeMetricFamily(
            "scheduler_flow_waiting",
            "Runs waiting on a flow-control limit (concurrency key, pool or rate limit)",
            labels=["tenant", "kind", "key"],
        ),
    }
    for name, counts in (("running", running), ("waiting", waiting)):
        folded: Counter = Counter()
        for (tenant_id, kind, key), value in counts.items():
            label_key = key if (tenant_id, kind, key) in shown else OTHER
            folded[(slugs.get(tenant_id, tenant_id), kind, label_key)] += value
        for labels, value in sorted(folded.items()):
            families[name].add_metric(list(labels), value)
        yield families[name]
