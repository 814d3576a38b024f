"""Reads of run checkpoints, always for one tenant: another tenant's run has none to show
(its execution id is already a 404 in `execution_get`; these filter by the tenant again)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from scheduler_app.models import RunCheckpoint, TaskExecution, Tenant


def _chain_of(execution: TaskExecution) -> uuid.UUID:
    return execution.root_execution_id or execution.id


def execution_checkpoint_get(*, tenant: Tenant, execution: TaskExecution) -> RunCheckpoint | None:
    """The checkpoint of `execution`'s run (its chain), or None."""
    return RunCheckpoint.objects.filter(tenant=tenant, chain_id=_chain_of(execution)).first()


def checkpoint_summaries(
    *, tenant: Tenant, executions: Iterable[TaskExecution]
) -> dict[uuid.UUID, dict]:
    """{execution id: {"size_bytes", "updated_at", "attempt"}} of the executions whose run has
    a checkpoint: one query for a page of executions, without the content."""
    chains = {execution.id: _chain_of(execution) for execution in executions}
    if not chains:
        return {}
    found = {
        row["chain_id"]: row
        for row in RunCheckpoint.objects.filter(
            tenant=tenant, chain_id__in=set(chains.values())
        ).values("chain_id", "size_bytes", "updated_at", "attempt")
    }
    return {
        execution_id: {key: row[key] for key in ("size_bytes", "updated_at", "attempt")}
        for execution_id, chain in chains.items()
        if (row := found.get(chain)) is not None
    }
