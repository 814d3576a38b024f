"""How the pages name an execution: a DAG node's as "DAG > run > node" (linked to its run),
any other by its task."""

from __future__ import annotations

from collections.abc import Iterable

from dags import selectors as dag_selectors
from scheduler_app.choices import DAG_NODE_TAG
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant


def label_dag_nodes(*, tenant: Tenant, executions: Iterable[TaskExecution]) -> list[TaskExecution]:
    """Give each execution that ran a DAG node its `dag_node` (run, DAG, node id), so the
    pages name it "DAG > run > node" and link to its run instead of to a hidden task."""
    executions = list(executions)
    links = dag_selectors.dag_nodes_of_executions(tenant=tenant, executions=executions)
    for execution in executions:
        execution.dag_node = links.get(execution.id)
    return executions


def is_dag_node_task(task: TaskDefinition) -> bool:
    """A hidden task that runs an inline DAG node: its DAG runs it, nobody triggers, pauses or
    edits it on its own (a trigger would run the node outside any run)."""
    return DAG_NODE_TAG in (task.tags or [])
