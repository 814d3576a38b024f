"""Reads of DAG data. Every function takes the tenant: another tenant's id is not found."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import CharField, F, Min, Q, QuerySet, Window
from django.db.models.functions import Cast, RowNumber

from dags.attempt_selectors import earlier_attempt_links
from dags.choices import RunStatus
from dags.models import (
    Dag,
    DagNodeAttemptExecution,
    DagNodeExecution,
    DagNodeState,
    DagRun,
    DagVersion,
)
from scheduler_app.errors import NotFound, ValidationFailed
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.selectors.run_search import id_prefix_match, time_range


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


def dag_run_of_tenant(*, tenant: Tenant, run_id: Any) -> DagRun:
    """A DAG run by its id alone (the `dag-runs/<id>` routes), in `tenant` only."""
    run = (
        DagRun.objects.select_related("version")
        .filter(tenant=tenant, id=_as_uuid(run_id, what="DAG run"))
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


def dag_node_of_execution(
    *, tenant: Tenant, execution: TaskExecution
) -> DagNodeExecution | DagNodeAttemptExecution | None:
    """The DAG node (and its run) an execution chain belongs to, if it is a DAG node's: the
    node's current attempt, or an earlier one a re-run superseded."""
    root = execution.root_execution_id or execution.id
    link = (
        DagNodeExecution.objects.select_related("run", "run__dag")
        .filter(execution_root_id=root, run__tenant=tenant)
        .first()
    )
    if link is not None:
        return link
    return earlier_attempt_links(tenant_id=tenant.id, roots=[root]).get(root)


def dag_run_search(*, tenant: Tenant, filters: dict[str, str]) -> QuerySet[DagRun]:
    """The tenant's DAG runs matching the Runs page's filters: dag (id or exact name), status,
    trigger, q (DAG name or run id prefix), window/since/until."""

    runs = DagRun.objects.select_related("dag", "version").filter(tenant=tenant)
    since, until = time_range(filters)
    if since:
        runs = runs.filter(scheduled_at__gte=since)
    if until:
        runs = runs.filter(scheduled_at__lt=until)
    if dag := filters.get("dag", "").strip():
        runs = runs.filter(dag__in=dag_lookup(tenant=tenant, reference=dag))
    if status := filters.get("status"):
        if status not in RunStatus.values:
            raise ValidationFailed(
                f"status of a DAG run must be one of {', '.join(RunStatus.values)}", field="status"
            )
        runs = runs.filter(status=status)
    if trigger := filters.get("trigger"):
        runs = runs.filter(trigger=trigger)
    if query := filters.get("q", "").strip():
        matches = Q(dag__name__icontains=query)
        if by_id := id_prefix_match(query):
            runs = runs.annotate(id_text=Cast("id", CharField()))
            matches |= by_id
        runs = runs.filter(matches)
    return runs


def dag_lookup(*, tenant: Tenant, reference: str) -> QuerySet[Dag]:
    """The tenant's DAG named `reference`, or with that id (empty when there is none)."""
    dags = dag_list(tenant=tenant)
    try:
        return dags.filter(id=uuid.UUID(reference))
    except ValueError:
        return dags.filter(name=reference)


def dag_node_execution_roots(*, tenant: Tenant, reference: str) -> QuerySet:
    """Root execution ids of the node executions of the tenant's DAG `reference`."""
    dags = dag_lookup(tenant=tenant, reference=reference)
    current = DagNodeExecution.objects.filter(run__tenant=tenant, run__dag__in=dags)
    earlier = DagNodeAttemptExecution.objects.filter(run__tenant=tenant, run__dag__in=dags)
    # Earlier attempts' executions (kept by a re-run) are the DAG's too.
    return (
        current.order_by()
        .values("execution_root_id")
        .union(earlier.order_by().values("execution_root_id"))
    )


def dag_nodes_of_executions(
    *, tenant: Tenant, executions: Iterable[TaskExecution]
) -> dict[uuid.UUID, DagNodeExecution | DagNodeAttemptExecution]:
    """Execution id -> the DAG node (with its run and DAG) it ran, for those that are nodes'.
    One query for a whole page of executions."""
    root_of = {
        e.id: e.root_execution_id or e.id for e in executions if e.trigger in ("dag", "retry")
    }
    if not root_of:
        return {}
    links: dict[uuid.UUID, Any] = {
        link.execution_root_id: link
        for link in DagNodeExecution.objects.select_related("run", "run__dag").filter(
            execution_root_id__in=set(root_of.values()), run__tenant=tenant
        )
    }
    links.update(
        earlier_attempt_links(tenant_id=tenant.id, roots=set(root_of.values()) - set(links))
    )
    return {eid: links[root] for eid, root in root_of.items() if root in links}


def dag_of_node_task(*, tenant: Tenant, task_id: uuid.UUID) -> tuple[Dag, str] | None:
    """The DAG (and node id) whose inline node a hidden task runs, from the newest version
    naming it."""
    # One query: the versions whose node -> task map has this task among its values (the ORM
    # has no lookup on a JSON object's values). The task id is a bound parameter; the table
    # name comes from the model.
    version = (
        DagVersion.objects.select_related("dag")
        .filter(dag__tenant=tenant, dag__deleted_at__isnull=True)
        .extra(  # noqa: S610
            where=[
                f"EXISTS (SELECT 1 FROM jsonb_each_text({DagVersion._meta.db_table}.node_tasks) "  # noqa: S608
                "AS node WHERE node.value = %s)"
            ],
            params=[str(task_id)],
        )
        .order_by("-created_at")
        .first()
    )
    if version is None:
        return None
    node_id = next(n for n, t in version.node_tasks.items() if t == str(task_id))
    return version.dag, node_id


def dag_owner_among(*, kind: str, object_id: Any, tenant_ids: list[int]) -> int | None:
    """Which of `tenant_ids` holds the DAG or DAG run `object_id` (None: none of them)."""
    try:
        wanted = _as_uuid(object_id, what=kind)
    except NotFound:
        return None
    rows = Dag.objects.filter(deleted_at__isnull=True) if kind == "dag" else DagRun.objects.all()
    return (
        rows.filter(id=wanted, tenant_id__in=tenant_ids).values_list("tenant_id", flat=True).first()
    )


def dag_run_grid_states(*, tenant: Tenant, runs: Iterable[DagRun]) -> dict[tuple, DagNodeState]:
    """(run id, node id) -> node state, for every node of `runs`, in one query (the grid of a
    DAG's recent runs)."""
    return {
        (state.run_id, state.node_id): state
        for state in DagNodeState.objects.filter(run__in=list(runs), run__tenant=tenant).only(
            "run_id", "node_id", "status", "execution_id", "attempts"
        )
    }


def dag_run_shards(*, run: DagRun) -> list[dict[str, Any]]:
    """Every shard of the run's mapped nodes with its latest attempt (node, index, execution),
    in node then shard order: what a fan-out node's box summarises as "shards n/m"."""
    links = list(
        DagNodeExecution.objects.filter(run=run, shard_index__isnull=False).order_by(
            "node_id", "shard_index"
        )
    )
    if not links:
        return []
    latest: dict[uuid.UUID, TaskExecution] = {}
    for execution in TaskExecution.objects.filter(
        tenant_id=run.tenant_id, root_execution_id__in=[link.execution_root_id for link in links]
    ).order_by("root_execution_id", "attempt"):
        latest[execution.root_execution_id] = execution
    return [
        {
            "node_id": link.node_id,
            "shard_index": link.shard_index,
            "execution": latest.get(link.execution_root_id),
        }
        for link in links
    ]
