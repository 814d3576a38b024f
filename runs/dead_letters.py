"""Retrying from the dead-letter queue: a lone run starts afresh, a DAG node is re-run inside
its run (a lone run would leave the DAG run unfinished for ever).

One at a time, or in bulk (the dashboard's selection, retry-all with or without filters, the
API's retry-all): a bulk action answers for each item what happened to it, naming it (its task,
or its DAG and node): retried (and the new run), no longer in the queue (a double click, another
operator), refused and why (a DAG node whose run is still going), or not found in this tenant
(an id of another tenant is not found, exactly as an id that never was)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dags.selectors import dag_node_of_execution
from dags.services.dead_letters import dag_node_dead_letter_retry_for
from scheduler_app import selectors
from scheduler_app.choices import Trigger
from scheduler_app.errors import DomainError, ValidationFailed
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.dead_letters import dead_letter_delete, dead_letter_fresh_run

# The queue's actions, in one place for the interfaces (dismissing needs no settling).
__all__ = [
    "BulkOutcome",
    "dead_letter_delete",
    "dead_letter_retry",
    "dead_letters_delete_many",
    "dead_letters_retry_all",
    "dead_letters_retry_many",
]

# How many ids one bulk request may name (the selection of a page; retry-all has no list).
MAX_BULK_IDS = 500

RETRIED, GONE, REFUSED, NOT_FOUND, REMOVED = (
    "retried",
    "already_handled",
    "refused",
    "not_found",
    "removed",
)


@dataclass(frozen=True)
class BulkOutcome:
    execution_id: str
    name: str  # its task's name (a DAG node's: its DAG's and node's); "" when not found
    outcome: str  # retried | already_handled | refused | not_found | removed
    detail: str  # what happened, in words
    new_execution_id: str | None = None


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


def _name(execution: TaskExecution) -> str:
    if execution.trigger in (Trigger.DAG, Trigger.RETRY):
        link = dag_node_of_execution(tenant=execution.tenant, execution=execution)
        if link is not None:
            return f"{link.run.dag.name} › {link.node_id}"
    return execution.task.name


def _retry_one(execution: TaskExecution, triggered_by: str) -> BulkOutcome:
    name, short = _name(execution), str(execution.id)
    try:
        retry = dead_letter_retry(execution=execution, triggered_by=triggered_by)
    except DomainError as error:  # a DAG node whose run is still going: it stays queued
        return BulkOutcome(short, name, REFUSED, error.message)
    if retry is None:
        return BulkOutcome(short, name, GONE, "no longer in the queue (already retried)")
    return BulkOutcome(short, name, RETRIED, "retried", new_execution_id=str(retry.id))


def _named(tenant: Tenant, execution_ids: Iterable[str]) -> list[tuple[str, TaskExecution | None]]:
    """Each id with the tenant's execution it names (None: not the tenant's, or no id)."""
    ids = list(dict.fromkeys(str(i).strip() for i in execution_ids if str(i).strip()))
    if len(ids) > MAX_BULK_IDS:
        raise ValidationFailed(
            f"at most {MAX_BULK_IDS} runs at once (use retry-all with filters)", field="ids"
        )
    valid = {}
    for raw in ids:
        try:
            valid[raw] = uuid.UUID(raw)
        except ValueError:
            continue
    found = {
        str(e.id): e
        for e in TaskExecution.objects.select_related("task", "tenant").filter(
            tenant=tenant, id__in=list(valid.values())
        )
    }
    return [(raw, found.get(str(valid[raw])) if raw in valid else None) for raw in ids]


def dead_letters_retry_many(
    *, tenant: Tenant, execution_ids: Iterable[str], triggered_by: str = ""
) -> list[BulkOutcome]:
    outcomes = []
    for raw, execution in _named(tenant, execution_ids):
        if execution is None:
            outcomes.append(BulkOutcome(raw, "", NOT_FOUND, "not found in this tenant"))
        elif not execution.dead_lettered:
            outcomes.append(
                BulkOutcome(raw, _name(execution), GONE, "no longer in the queue (already retried)")
            )
        else:
            outcomes.append(_retry_one(execution, triggered_by))
    return outcomes


def dead_letters_delete_many(
    *, tenant: Tenant, execution_ids: Iterable[str], actor: str = ""
) -> list[BulkOutcome]:
    outcomes = []
    for raw, execution in _named(tenant, execution_ids):
        if execution is None:
            outcomes.append(BulkOutcome(raw, "", NOT_FOUND, "not found in this tenant"))
        elif dead_letter_delete(execution=execution):
            outcomes.append(BulkOutcome(raw, _name(execution), REMOVED, "removed from the queue"))
        else:
            outcomes.append(
                BulkOutcome(raw, _name(execution), GONE, "no longer in the queue (already handled)")
            )
    return outcomes


def dead_letters_retry_matching(
    *, tenant: Tenant, filters: Mapping[str, str] | None = None, triggered_by: str = ""
) -> list[BulkOutcome]:
    """Retry every dead letter of the tenant that `filters` match (none: all of them)."""
    pending = selectors.dead_letter_list(tenant=tenant, filters=filters).select_related("tenant")
    outcomes = [_retry_one(e, triggered_by) for e in pending.iterator(chunk_size=500)]
    return outcomes


def dead_letters_retry_all(
    *, tenant: Tenant, triggered_by: str = "", filters: Mapping[str, str] | None = None
) -> int:
    outcomes = dead_letters_retry_matching(
        tenant=tenant, filters=filters, triggered_by=triggered_by
    )
    return sum(outcome.outcome == RETRIED for outcome in outcomes)
