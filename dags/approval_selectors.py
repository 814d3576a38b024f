"""Reads of approval waits and their decisions, tenant-scoped: another tenant's approval id,
run or node reads as one that does not exist (404)."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.choices import ApprovalWaitStatus, RunStatus
from dags.models import DagNodeState, DagRun
from scheduler_app.errors import NotFound, ValidationFailed
from scheduler_app.models import Tenant

_WITH_DECISIONS = Prefetch("decisions", queryset=ApprovalDecision.objects.order_by("decided_at"))


def approval_list(*, tenant: Tenant, status: str | None = ApprovalWaitStatus.WAITING) -> QuerySet:
    """The tenant's approvals, newest first; by default the pending ones (of running runs)."""
    queryset = ApprovalWait.objects.filter(tenant=tenant).select_related("run", "run__dag")
    if status:
        if status not in ApprovalWaitStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(ApprovalWaitStatus.values)}", field="status"
            )
        queryset = queryset.filter(status=status)
        if status == ApprovalWaitStatus.WAITING:
            queryset = queryset.filter(run__status=RunStatus.RUNNING)
    return queryset.prefetch_related(_WITH_DECISIONS).order_by("-started_at", "-id")


def approval_get(*, tenant: Tenant, approval_id: Any) -> ApprovalWait:
    text = str(approval_id)
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise NotFound("approval not found")
    wait = approval_list(tenant=tenant, status=None).filter(id=int(text)).first()
    if wait is None:
        raise NotFound("approval not found")
    return wait


def approval_of_node(*, tenant: Tenant, run: DagRun, node_id: str) -> ApprovalWait:
    """The wait of the node's current attempt (the run is already the tenant's)."""
    state = DagNodeState.objects.filter(run=run, node_id=node_id).first()
    wait = (
        approval_list(tenant=tenant, status=None)
        .filter(run=run, node_id=node_id, attempt_number=state.attempt_number if state else 0)
        .first()
    )
    if wait is None:
        raise NotFound("no approval node of that id in this run")
    return wait


def approval_waits_of_run(*, run: DagRun) -> list[ApprovalWait]:
    """The run is already the tenant's (the caller got it from a tenant-scoped selector)."""
    return list(
        ApprovalWait.objects.filter(run=run)
        .select_related("run", "run__dag")
        .prefetch_related(_WITH_DECISIONS)
        .order_by("started_at", "id")
    )
