"""Retrying from the dead-letter queue: a lone run starts afresh, a DAG node is re-run inside
its run (a lone run would leave the DAG run unfinished for ever)."""

from __future__ import annotations

from dags.services.dead_letters import dag_node_dead_letter_retry_for
from scheduler_app.choices import Trigger
from scheduler_app.errors import DomainError
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.dead_letters import dead_letter_delete, dead_letter_fresh_run

# The queue's actions, in one place for the interfaces (dismissing needs no settling).
__all__ = ["dead_letter_delete", "dead_letter_retry", "dead_letters_retry_all"]


def dead_letter_retry(*, execution: TaskExecution, triggered_by: str = "") -> TaskExecution | None:
    """A fresh run of a dead-lettered one (attempt 1, the task's full retry budget); None
    when it was no longer dead-lettered (a double click retries once). A DAG node's is
    re-run inside its run, which raises Conflict while the run is still going;
    `triggered_by` ("user:alice") is kept as who started the node's new attempt."""
    if execution.trigger in (Trigger.DAG, Trigger.RETRY):
        handled, retry = dag_node_dead_letter_retry_for(
            execution=execution, triggered_by=triggered_by
        )
        if handled:
            return retry
    return dead_letter_fresh_run(execution=execution)


def dead_letters_retry_all(*, tenant: Tenant, triggered_by: str = "") -> int:
    retried = 0
    pending = TaskExecution.objects.select_related("task").filter(tenant=tenant, dead_lettered=True)
    for execution in pending.iterator(chunk_size=500):
        try:
            if dead_letter_retry(execution=execution, triggered_by=triggered_by) is not None:
                retried += 1
        except DomainError:  # a DAG node whose run is still going: it stays queued
            continue
    return retried
