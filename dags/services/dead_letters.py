"""Retrying a dead-lettered DAG node: inside its run, so the run can still finish.

A node's execution that ran out of attempts is dead-lettered like any other; retrying it as a
lone execution (what the dead-letter queue does for a task) would run the node outside its run
and leave the run `partially_completed` or `failed` for ever. Here the node, and what downstream
of it did not succeed, is re-run in its run (the run's re-run, limited to that node).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dags.attempt_selectors import earlier_attempt_links
from dags.choices import NodeAttemptTrigger
from dags.models import DagNodeAttemptExecution, DagNodeExecution, DagNodeState, DagRun
from dags.services.runs import rerunnable_run_lock, run_nodes_rerun
from scheduler_app.errors import Conflict, NotFound
from scheduler_app.models import TaskExecution
from scheduler_app.services.audit import audit_action, audit_unchanged


def dag_node_dead_letter_retry(
    *,
    execution: TaskExecution,
    link: DagNodeExecution | DagNodeAttemptExecution,
    triggered_by: str = "",
) -> DagRun | None:
    """Re-run the node `execution` ran (found by `link`) inside its run.

    The run must have ended (a Conflict says so while it is still going: its engine still owns
    the node's state). The dead letters of the node's executions leave the queue in the same
    transaction, so a double click re-runs once: None when it was no longer dead-lettered.
    """
    with transaction.atomic():
        run = DagRun.objects.filter(id=link.run_id, tenant_id=execution.tenant_id).first()
        if run is None:
            raise NotFound("DAG run not found")
        try:
            locked = rerunnable_run_lock(run)
        except Conflict as error:
            # The run's own refusal says "this one is running" of the run; whoever asked
            # retried a node's execution, so name the run (a bulk retry lists many).
            raise Conflict(
                f"its DAG run {str(run.id)[:8]} is {run.status}: a node is retried inside"
                " its run, once the run has failed, partially completed or been cancelled",
                field="status",
            ) from error
        roots = [
            *DagNodeExecution.objects.filter(run=locked, node_id=link.node_id).values_list(
                "execution_root_id", flat=True
            ),
            # Earlier attempts' chains, which a re-run superseded, are the node's too.
            *DagNodeAttemptExecution.objects.filter(run=locked, node_id=link.node_id).values_list(
                "execution_root_id", flat=True
            ),
        ]
        taken = TaskExecution.platform.filter(id=execution.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=timezone.now()
        )
        if taken != 1:
            audit_unchanged()
            return None
        # The node's other dead letters (other shards, older attempts) are answered too.
        TaskExecution.objects.filter(
            tenant_id=execution.tenant_id, root_execution_id__in=roots, dead_lettered=True
        ).update(dead_lettered=False, updated_at=timezone.now())
        states = {s.node_id: s for s in DagNodeState.objects.filter(run=locked)}
        run_nodes_rerun(
            locked,
            states,
            {link.node_id},
            trigger=NodeAttemptTrigger.DEAD_LETTER_RETRY,
            triggered_by=triggered_by,
        )
        audit_action(
            tenant=run.tenant,
            verb="dlq.retry",
            object_type="execution",
            object_id=execution.id,
            before={"dead_lettered": True},
            after={"dead_lettered": False, "dag_run": str(run.id), "node": link.node_id},
        )
    run.refresh_from_db()
    return run


def dag_node_dead_letter_retry_for(
    *, execution: TaskExecution, triggered_by: str = ""
) -> tuple[bool, TaskExecution | None]:
    """For the dead-letter queue's own retry (API, admin, retry-all): (False, None) when
    `execution` is no DAG node's (of its current attempt or an earlier one); else the node
    re-run inside its run and (True, the first execution of its new chain), or (True, None)
    when it was no longer dead-lettered."""
    root = execution.root_execution_id or execution.id
    link = DagNodeExecution.objects.filter(
        execution_root_id=root, run__tenant_id=execution.tenant_id
    ).first() or earlier_attempt_links(tenant_id=execution.tenant_id, roots=[root]).get(root)
    if link is None:
        return False, None
    run = dag_node_dead_letter_retry(execution=execution, link=link, triggered_by=triggered_by)
    if run is None:
        return True, None
    again = DagNodeExecution.objects.filter(run=run, node_id=link.node_id).order_by("shard_index")
    first = again.first()
    return True, (
        TaskExecution.platform.filter(id=first.execution_root_id).first() if first else None
    )
