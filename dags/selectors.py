"""Reads of DAG data. Every function takes the tenant: another tenant's id is not found."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import F, Min, QuerySet, Window
from django.db.models.functions import RowNumber

from dags.models import Dag, DagNodeExecution, DagNodeState, DagRun, DagVersion
from scheduler_app.errors import NotFound
from scheduler_app.models import TaskExecution, Tenant


def _as_uuid(value: Any, *, what: str) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as error:
        raise NotFound(f"{what} not found") from error


def dag_list(*, tenant: Tenant) -> QuerySet[Dag]:
    return Dag.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name")


def dag_get(*, tenant: Tenant, dag_id: Any) -> Dag:
    dag = dag_list(tenant=tenant).filter(id=_as_uuid(dag_id, what="DAG")).first()
    if dag is None:
        raise NotFound("DAG not found")
    return dag


def dag_version_get(*, dag: Dag) -> DagVersion | None:
    return DagVersion.objects.filter(dag=dag, number=dag.version).first()


def dag_run_list(*, tenant: Tenant, dag: Dag) -> QuerySet[DagRun]:
    return DagRun.objects.filter(tenant=tenant, dag=dag).select_related("version")


def dag_run_get(*, tenant: Tenant, dag: Dag, run_id: Any) -> DagRun:
    run = (
        DagRun.objects.select_related("version")
        .filter(tenant=tenant, dag=dag, id=_as_uuid(run_id, what="DAG run"))
        .first()
    )
    if run is None:
        raise NotFound("DAG run not found")
    return run


def dag_run_nodes(*, run: DagRun) -> list[DagNodeState]:
    """Every node of the run; a node whose execution is running shows `running`."""
    nodes = list(DagNodeState.objects.filter(run=run).order_by("id"))
    waiting = {
        n.execution_id for n in nodes if n.status in ("queued", "pending") and n.execution_id
    }
    if waiting:
        running = set(
            TaskExecution.objects.filter(
                tenant_id=run.tenant_id, root_execution_id__in=waiting, status="running"
            ).values_list("root_execution_id", flat=True)
        )
        for node in nodes:
            if node.execution_id in running:
                node.status = "running"
    return nodes


def dag_recent_runs(
    *, tenant: Tenant, dag_ids: Iterable[uuid.UUID], per_dag: int = 5
) -> dict[uuid.UUID, list[DagRun]]:
    """The latest `per_dag` runs of each DAG, in one query (a window rank per DAG)."""
    ranked = (
        DagRun.objects.filter(tenant=tenant, dag_id__in=list(dag_ids))
        .annotate(
            recency=Window(
                RowNumber(), partition_by=[F("dag_id")], order_by=F("scheduled_at").desc()
            )
        )
        .filter(recency__lte=per_dag)
        .order_by("dag_id", "recency")
    )
    runs: dict[uuid.UUID, list[DagRun]] = {}
    for run in ranked:
        runs.setdefault(run.dag_id, []).append(run)
    return runs


def dag_run_execution_starts(*, run: DagRun, nodes: Iterable[DagNodeState]) -> dict[str, Any]:
    """Node id -> when the first attempt of its current execution chain started on a worker."""
    node_of = {node.execution_id: node.node_id for node in nodes if node.execution_id}
    if not node_of:
        return {}
    starts = (
        TaskExecution.objects.filter(
            tenant_id=run.tenant_id, root_execution_id__in=list(node_of), started_at__isnull=False
        )
        .values("root_execution_id")
        .annotate(first_start=Min("started_at"))
    )
    return {node_of[row["root_execution_id"]]: row["first_start"] for row in starts}


def dag_node_of_execution(*, tenant: Tenant, execution: TaskExecution) -> DagNodeExecution | None:
    """The DAG node (and its run) an execution chain belongs to, if it is a DAG node's."""
    root = execution.root_execution_id or execution.id
    return (
        DagNodeExecution.objects.select_related("run", "run__dag")
        .filter(execution_root_id=root, run__tenant=tenant)
        .first()
    )
