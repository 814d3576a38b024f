"""What a DAG run that did not wholly succeed says about why: its failed nodes and the nodes
that never ran because of them, for a page of runs in one query (no query per row)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from dags.choices import NodeStatus, RunStatus
from dags.models import DagNodeState
from scheduler_app.models import Tenant

ENDED_BADLY = (NodeStatus.FAILED, NodeStatus.TIMED_OUT, NodeStatus.CANCELLED)
EXPLAINED_RUNS = (RunStatus.FAILED, RunStatus.PARTIALLY_COMPLETED, RunStatus.CANCELLED)


@dataclass
class RunOutcome:
    failed: list[tuple[str, str]] = field(default_factory=list)  # (node id, node state)
    not_run: list[str] = field(default_factory=list)  # upstream failed: never dispatched


def dag_run_outcomes(*, tenant: Tenant, runs: Iterable) -> dict[uuid.UUID, RunOutcome]:
    """The outcome of each run of `runs` that ended failed, partly or cancelled (the tenant's
    only: a run of another tenant in `runs` finds no nodes)."""
    wanted = [run.id for run in runs if run.status in EXPLAINED_RUNS]
    outcomes: dict[uuid.UUID, RunOutcome] = {}
    if not wanted:
        return outcomes
    rows = (
        DagNodeState.objects.filter(
            run__tenant=tenant,
            run_id__in=wanted,
            status__in=[*ENDED_BADLY, NodeStatus.UPSTREAM_FAILED],
        )
        .order_by("run_id", "id")
        .values_list("run_id", "node_id", "status")
    )
    for run_id, node_id, status in rows:
        outcome = outcomes.setdefault(run_id, RunOutcome())
        if status == NodeStatus.UPSTREAM_FAILED:
            outcome.not_run.append(node_id)
        else:
            outcome.failed.append((node_id, status))
    return outcomes
