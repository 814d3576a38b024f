"""The dead-letter queue: runs whose last attempt failed. Retry them or dismiss them."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dags.services.dead_letters import dag_node_dead_letter_retry_for
from scheduler_app.choices import Trigger
from scheduler_app.errors import DomainError
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.retries import fresh_run_create


def dead_letter_retry(*, execution: TaskExecution, triggered_by: str = "") -> TaskExecution | None:
    """Start a fresh run (attempt 1, the task's full retry budget) of a dead-lettered one.

    The conditional UPDATE takes it out of the queue first, so a double click retries once.
    Returns None when it was no longer dead-lettered. A DAG node's dead letter is re-run
    inside its run instead (a lone run would leave the run unfinished for ever); that
    raises Conflict while the run is still going; `triggered_by` ("user:alice") is kept as
    who started the node's new attempt.
    """
    if execution.trigger in (Trigger.DAG, Trigger.RETRY):
        handled, retry = dag_node_dead_letter_retry_for(
            execution=execution, triggered_by=triggered_by
        )
        if handled:
            return retry
    now = timezone.now()
    with transaction.atomic():
        taken = TaskExecution.objects.filter(id=execution.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=now
        )
        if taken != 1:
            return None
        return fresh_run_create(previous=execution, now=now)


def dead_letter_delete(*, execution: TaskExecution) -> bool:
    """Dismiss from the queue; the execution stays in the history (dead_lettered_at kept)."""
    return (
        TaskExecution.objects.filter(id=execution.id, dead_lettered=True).update(
            dead_lettered=False, updated_at=timezone.now()
        )
        == 1
    )


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
