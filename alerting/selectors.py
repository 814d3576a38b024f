"""Reads of alerting data, scoped to the tenant (another tenant's channel or incident is a
404, and never listed)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from alerting.models import AlertIncident, IncidentState, NotificationChannel
from dags.models import Dag, DagRun, DagVersion
from scheduler_app.errors import NotFound
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.task_names import task_display_name

if TYPE_CHECKING:
    from alerting.services.delivery import Target


def channel_list(*, tenant: Tenant) -> QuerySet[NotificationChannel]:
    return NotificationChannel.objects.filter(tenant=tenant).order_by("name")


def channel_get(*, tenant: Tenant, channel_id: Any) -> NotificationChannel:
    try:
        wanted = channel_id if isinstance(channel_id, uuid.UUID) else uuid.UUID(str(channel_id))
    except ValueError as error:
        raise NotFound("channel not found") from error
    channel = channel_list(tenant=tenant).filter(id=wanted).first()
    if channel is None:
        raise NotFound("channel not found")
    return channel


def delivery_allowed_hosts(target: Target) -> list[str]:
    """The internal hosts a delivery to `target` may reach past the SSRF guard: the
    operator's list for the platform's own alerts, the tenant's own (set by the operator)
    for a tenant's, none for a target that says neither."""
    if target.platform:
        return list(settings.ALERTS["WEBHOOK_ALLOWED_HOSTS"])
    if target.tenant_id is None:
        return []
    hosts = Tenant.objects.filter(id=target.tenant_id).values_list(
        "webhook_allowed_hosts", flat=True
    )
    return list(hosts.first() or [])


# Incidents. A tenant sees its own only; the platform's (no tenant: dead workers, queue
# depth) are the operators', in the admin and their channels.

TASK_KEYED_RULES = ("task_failing", "missed_schedule")
TENANT_KEYED_RULES = ("error_rate_high", "success_rate_low")
RECENT = timedelta(hours=24)


def incident_list(*, tenant: Tenant, state: str | None = None) -> QuerySet[AlertIncident]:
    incidents = AlertIncident.objects.filter(tenant=tenant).order_by("-opened_at")
    if state == IncidentState.OPEN:
        return incidents.filter(resolved_at__isnull=True, acknowledged_at__isnull=True)
    if state == IncidentState.ACKNOWLEDGED:
        return incidents.filter(resolved_at__isnull=True, acknowledged_at__isnull=False)
    if state == IncidentState.RESOLVED:
        return incidents.filter(resolved_at__isnull=False).order_by("-resolved_at")
    return incidents


def incident_get(*, tenant: Tenant, incident_id: Any) -> AlertIncident:
    try:
        wanted = incident_id if isinstance(incident_id, uuid.UUID) else uuid.UUID(str(incident_id))
    except ValueError as error:
        raise NotFound("incident not found") from error
    incident = AlertIncident.objects.filter(tenant=tenant, id=wanted).first()
    if incident is None:
        raise NotFound("incident not found")
    return incident


def incidents_open_count(*, tenant: Tenant) -> int:
    """The nav's badge: open and nobody acknowledged them yet."""
    return incident_list(tenant=tenant, state=IncidentState.OPEN).count()


def incidents_current(*, tenant: Tenant, now: datetime | None = None) -> QuerySet[AlertIncident]:
    """Open, acknowledged, and resolved in the last 24 hours: what the overview shows."""
    since = (now or timezone.now()) - RECENT
    return incident_list(tenant=tenant).filter(
        Q(resolved_at__isnull=True) | Q(resolved_at__gte=since)
    )


def _sla_keys_of(*, incidents: QuerySet[AlertIncident], prefix: str) -> dict[uuid.UUID, str]:
    keys = incidents.filter(rule="sla_missed", key__startswith=prefix).values_list("key", flat=True)
    ids = {}
    for key in keys:
        with contextlib.suppress(ValueError):
            ids[uuid.UUID(key.removeprefix(prefix))] = key
    return ids


def incidents_of_task(*, tenant: Tenant, task: TaskDefinition) -> list[AlertIncident]:
    """The task's current incidents: its own failing or missed fires, its runs' SLA misses."""
    current = incidents_current(tenant=tenant)
    runs = _sla_keys_of(incidents=current, prefix="execution:")
    of_task = TaskExecution.objects.filter(tenant=tenant, task=task, id__in=list(runs))
    keys = [runs[execution_id] for execution_id in of_task.values_list("id", flat=True)]
    wanted = Q(rule__in=TASK_KEYED_RULES, key=str(task.id)) | Q(rule="sla_missed", key__in=keys)
    return list(current.filter(wanted)[:20])


def incidents_of_dag(*, tenant: Tenant, dag: Dag) -> list[AlertIncident]:
    """The DAG's current incidents: its runs' SLA misses, and its nodes' tasks failing."""
    current = incidents_current(tenant=tenant)
    runs = _sla_keys_of(incidents=current, prefix="dag_run:")
    of_dag = DagRun.objects.filter(tenant=tenant, dag=dag, id__in=list(runs))
    keys = [runs[run_id] for run_id in of_dag.values_list("id", flat=True)]
    node_tasks = {
        str(task_id)
        for spec in DagVersion.objects.filter(dag=dag).values_list("node_tasks", flat=True)
        for task_id in (spec or {}).values()
    }
    wanted = Q(rule__in=TASK_KEYED_RULES, key__in=node_tasks) | Q(rule="sla_missed", key__in=keys)
    return list(current.filter(wanted)[:20])


@dataclass(frozen=True)
class IncidentSubject:
    """What an incident is about, by name: `kind` is task, execution, dag_run, tenant or
    quota; `object_id` (and `dag_id` for a DAG run) is what a link needs."""

    kind: str
    name: str
    object_id: str = ""
    dag_id: str = ""


def _uuid_or_none(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def incident_subjects(
    *, tenant: Tenant, incidents: Iterable[AlertIncident]
) -> dict[uuid.UUID, IncidentSubject]:
    """Each incident's subject, read in one query per kind (the key is an id; the page says a
    name). Only `tenant`'s objects are looked up, whatever a key says."""
    incidents = list(incidents)
    task_ids, run_ids, dag_run_ids = set(), set(), set()
    for incident in incidents:
        if incident.rule in TASK_KEYED_RULES:
            task_ids.add(_uuid_or_none(incident.key))
        elif incident.key.startswith("execution:"):
            run_ids.add(_uuid_or_none(incident.key.removeprefix("execution:")))
        elif incident.key.startswith("dag_run:"):
            dag_run_ids.add(_uuid_or_none(incident.key.removeprefix("dag_run:")))
    tasks = {
        str(task.id): task
        for task in TaskDefinition.objects.filter(tenant=tenant, id__in=task_ids - {None})
    }
    executions = {
        str(execution.id): execution
        for execution in TaskExecution.objects.filter(
            tenant=tenant, id__in=run_ids - {None}
        ).select_related("task")
    }
    dag_runs = {
        str(run.id): run
        for run in DagRun.objects.filter(tenant=tenant, id__in=dag_run_ids - {None}).select_related(
            "dag"
        )
    }
    subjects = {}
    for incident in incidents:
        subjects[incident.id] = _subject(incident, tenant, tasks, executions, dag_runs)
    return subjects


def _subject(
    incident: AlertIncident,
    tenant: Tenant,
    tasks: dict[str, TaskDefinition],
    executions: dict[str, TaskExecution],
    dag_runs: dict[str, DagRun],
) -> IncidentSubject:
    key = incident.key
    if incident.rule in TASK_KEYED_RULES:
        task = tasks.get(key)
        if task is None:
            return IncidentSubject("task", "a deleted task")
        name = task_display_name(task.name)
        return IncidentSubject("task", name, "" if task.deleted_at else str(task.id))
    if key.startswith("execution:"):
        execution = executions.get(key.removeprefix("execution:"))
        if execution is None:
            return IncidentSubject("execution", "a run no longer kept")
        when = f"{execution.scheduled_at:%Y-%m-%d %H:%M:%S} UTC"
        name = f"run of {task_display_name(execution.task.name)} at {when}"
        return IncidentSubject("execution", name, str(execution.id))
    if key.startswith("dag_run:"):
        run = dag_runs.get(key.removeprefix("dag_run:"))
        if run is None:
            return IncidentSubject("dag_run", "a DAG run no longer kept")
        name = f"run {str(run.id)[:8]} of DAG {run.dag.name}"
        return IncidentSubject("dag_run", name, str(run.id), str(run.dag_id))
    if incident.rule in TENANT_KEYED_RULES:
        return IncidentSubject("tenant", f"all runs of {tenant.name or tenant.slug}")
    if incident.rule == "quota_breached":
        return IncidentSubject("quota", f"quota {key.split(':', 1)[-1]}")
    return IncidentSubject("other", key)
