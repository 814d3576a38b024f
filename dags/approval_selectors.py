"""Reads of approval waits and their decisions, tenant-scoped: another tenant's approval id,
run or node reads as one that does not exist (404)."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.choices import ApprovalWaitStatus, RunStatus
from dags.models import DagNodeState, DagRun
from dags.spec_approval import APPROVER_ROLES
from scheduler_app.errors import NotFound, ValidationFailed
from scheduler_app.models import Tenant, TenantMembership

# A role admits every higher one (viewer < operator < admin).
ROLES_AT_LEAST = {role: APPROVER_ROLES[index:] for index, role in enumerate(APPROVER_ROLES)}


def approval_eligible_members(*, tenant_id: Any, role: str | None, usernames: list[str]):
    """The tenant's memberships (with their users) that may decide such a wait: read again
    at each decision, so a member removed or demoted since the run started no longer
    counts."""
    members = TenantMembership.objects.select_related("user").filter(
        tenant_id=tenant_id, role__in=APPROVER_ROLES, user__is_active=True
    )
    if role:
        return members.filter(role__in=ROLES_AT_LEAST[role])
    return members.filter(user__username__in=usernames)


def approval_refusal(*, wait: ApprovalWait, user: Any) -> str:
    """Why `user` may not decide `wait` now ("" when they may): what the run page reads to
    show the buttons or say why not. The service checks the same under the run's lock."""
    if wait.status != ApprovalWaitStatus.WAITING or wait.run.status != RunStatus.RUNNING:
        return f"this approval is {wait.status}"
    eligible = approval_eligible_members(
        tenant_id=wait.tenant_id, role=wait.role, usernames=wait.usernames
    )
    if not eligible.filter(user_id=user.pk).exists():
        return f"only {'an ' + wait.role + ' or higher' if wait.role else 'the named approvers'}"
    if wait.run.triggered_by == f"user:{user.get_username()}":
        return "you triggered this run: someone else decides"
    if any(decision.user_id == user.pk for decision in wait.decisions.all()):
        return "you have decided"
    return ""


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
        ApprovalWait.objects.filter(tenant_id=run.tenant_id, run=run)
        .select_related("run", "run__dag")
        .prefetch_related(_WITH_DECISIONS)
        .order_by("started_at", "id")
    )
