"""Decisions on approval nodes, and their timeout.

A decision (`approval_decide`) locks the run first, as every change of a run does
(`state.run_lock`), so two approvers deciding at once are serialized: the one whose approval
reaches the quorum ends the node, the other finds it ended (409) or, when it came first,
counts toward it; the node is released once. The checks, in the order a person would want
them explained:

- the wait is still open (its run running, the node still waiting): else 409;
- the user may decide it: a member of the run's tenant whose role is the wait's role or
  higher, or one of its named users (operator or admin), else 403; a viewer never may;
- the user did not trigger the run (`DagRun.triggered_by`): 403;
- the user has not decided it already (one user counts once; the unique key backs it): 409.

Approved by `required` distinct users -> the node succeeds with the decisions as its result;
one rejection -> it fails with the rejecter's comment as its error, and the DAG's failure
policy applies as to any failed node. Each decision is in the audit log, in words.

The leader's housekeeping ends waits past their deadline (`approval_waits_expire`, registered
with the DAG engine's chores as `event_waits_expire` is): `on_timeout` reject fails the node,
approve succeeds it, skip skips it (its downstream is skipped in turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.approval_selectors import approval_eligible_members
from dags.choices import (
    ApprovalVerdict,
    ApprovalWaitStatus,
    NodeStatus,
    RunStatus,
)
from dags.engine.completion import node_complete
from dags.engine.state import run_lock
from dags.models import DagNodeState, DagRun
from scheduler_app.errors import Conflict, Forbidden, ValidationFailed
from scheduler_app.services.audit import audit_record

MAX_COMMENT = 2000


@dataclass(frozen=True)
class Decided:
    decision: ApprovalDecision
    wait: ApprovalWait
    released: bool  # this decision ended the node (the quorum, or a rejection)


def decisions_result(wait: ApprovalWait) -> dict[str, Any]:
    """The node's result: who decided what, when and how."""
    return {
        "decisions": [
            {
                "user": decision.username,
                "verdict": decision.verdict,
                "comment": decision.comment,
                "via": decision.via,
                "decided_at": decision.decided_at.isoformat().replace("+00:00", "Z"),
            }
            for decision in ApprovalDecision.objects.filter(wait_id=wait.id).order_by(
                "decided_at", "id"
            )
        ]
    }


def _wait_is_open(wait: ApprovalWait, run: DagRun) -> bool:
    return (
        wait.status == ApprovalWaitStatus.WAITING
        and run.status == RunStatus.RUNNING
        and DagNodeState.objects.filter(
            run=run,
            node_id=wait.node_id,
            attempt_number=wait.attempt_number,
            status=NodeStatus.WAITING_FOR_APPROVAL,
        ).exists()
    )


def _summary(*, username: str, verdict: str, wait: ApprovalWait, run: DagRun, comment: str) -> str:
    words = "approved" if verdict == ApprovalVerdict.APPROVE else "rejected"
    said = f": {comment}" if comment else " (no comment)"
    return f"{username} {words} node {wait.node_id!r} of run {run.id} of DAG {run.dag.name!r}{said}"


def approval_decide(
    *,
    wait_id: int,
    user: Any,
    verdict: str,
    comment: str = "",
    via: str,
    link_nonce: str | None = None,
    now: datetime | None = None,
) -> Decided:
    """Record `user`'s decision on a wait (the caller found the wait through a tenant-scoped
    selector or a signed link); raises Forbidden (403), Conflict (409) or ValidationFailed."""
    if verdict not in ApprovalVerdict.values:
        raise ValidationFailed("verdict must be approve or reject", field="verdict")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
        raise ValidationFailed(
            f"comment must be text of at most {MAX_COMMENT} characters", field="comment"
        )
    comment = comment.strip()
    now = now or timezone.now()
    with transaction.atomic():
        run_id = ApprovalWait.platform.values_list("run_id", flat=True).get(id=wait_id)
        run = run_lock(run_id)
        wait = ApprovalWait.platform.select_for_update().get(id=wait_id)
        if not _wait_is_open(wait, run):
            raise Conflict(f"this approval is no longer open (it is {wait.status})", field="status")
        eligible = approval_eligible_members(
            tenant_id=wait.tenant_id, role=wait.role, usernames=wait.usernames
        ).filter(user_id=user.pk)
        if not eligible.exists():
            who = f"an {wait.role} or higher" if wait.role else "one of the named approvers"
            raise Forbidden(f"only {who} of this tenant may decide this approval")
        if run.triggered_by == f"user:{user.get_username()}":
            raise Forbidden("you triggered this run: someone else must decide its approval")
        try:
            with transaction.atomic():
                decision = ApprovalDecision.objects.create(
                    wait=wait,
                    user=user,
                    username=user.get_username(),
                    verdict=verdict,
                    comment=comment,
                    via=via,
                    link_nonce=link_nonce,
                    decided_at=now,
                )
        except IntegrityError as error:
            raise Conflict("you have already decided this approval", field="verdict") from error
        audit_record(
            tenant=run.tenant,
            actor=f"user:{user.get_username()}",
            action=f"approval.{verdict}",
            object_type="approval",
            object_id=str(wait.id),
            detail={
                "summary": _summary(
                    username=user.get_username(),
                    verdict=verdict,
                    wait=wait,
                    run=run,
                    comment=comment,
                ),
                "verb": "approved" if verdict == ApprovalVerdict.APPROVE else "rejected",
                "comment": comment,
                "via": via,
                "dag_id": str(run.dag_id),
                "dag_run_id": str(run.id),
                "node_id": wait.node_id,
            },
        )
        released = _wait_settle(wait=wait, run=run, now=now, last=decision)
    return Decided(decision=decision, wait=wait, released=released)


def _wait_settle(*, wait: ApprovalWait, run: DagRun, now: datetime, last: ApprovalDecision) -> bool:
    """After a decision (run and wait locked): end the node if it decided it."""
    if last.verdict == ApprovalVerdict.REJECT:
        status, ended = NodeStatus.FAILED, ApprovalWaitStatus.REJECTED
        error = f"rejected by {last.username}" + (f": {last.comment}" if last.comment else "")
    else:
        approvals = ApprovalDecision.objects.filter(
            wait_id=wait.id, verdict=ApprovalVerdict.APPROVE
        ).count()
        if approvals < wait.required:
            return False
        status, ended, error = NodeStatus.SUCCESS, ApprovalWaitStatus.APPROVED, ""
    ApprovalWait.platform.filter(id=wait.id).update(status=ended, resolved_at=now)
    wait.status, wait.resolved_at = ended, now
    node_complete(
        run=run,
        node_id=wait.node_id,
        status=status,
        result=decisions_result(wait),
        error=error,
    )
    return True


TIMEOUT_OUTCOMES = {
    "reject": (NodeStatus.FAILED, ApprovalWaitStatus.REJECTED),
    "approve": (NodeStatus.SUCCESS, ApprovalWaitStatus.APPROVED),
    "skip": (NodeStatus.SKIPPED, ApprovalWaitStatus.SKIPPED),
}


def approval_waits_expire(*, now: datetime | None = None, limit: int = 500) -> int:
    """Waits past their deadline end by their `on_timeout` (the leader's housekeeping); a
    wait whose run ended another way is closed `cancelled`. Returns the nodes it ended."""
    now = now or timezone.now()
    ended = 0
    due = ApprovalWait.platform.filter(
        status=ApprovalWaitStatus.WAITING, deadline__lte=now
    ).order_by("deadline")[:limit]
    for candidate in due:
        with transaction.atomic():
            run = run_lock(candidate.run_id)
            wait = ApprovalWait.platform.select_for_update().get(id=candidate.id)
            if wait.status != ApprovalWaitStatus.WAITING:
                continue  # decided meanwhile
            if not _wait_is_open(wait, run):
                ApprovalWait.platform.filter(id=wait.id).update(
                    status=ApprovalWaitStatus.CANCELLED, resolved_at=now
                )
                continue
            status, wait_status = TIMEOUT_OUTCOMES[wait.on_timeout]
            ApprovalWait.platform.filter(id=wait.id).update(status=wait_status, resolved_at=now)
            seconds = int((wait.deadline - wait.started_at).total_seconds())
            error = (
                f"no decision within {seconds} s (on_timeout: {wait.on_timeout})"
                if status == NodeStatus.FAILED
                else ""
            )
            audit_record(
                tenant=run.tenant,
                actor="system",
                action=f"approval.timeout_{wait.on_timeout}",
                object_type="approval",
                object_id=str(wait.id),
                detail={
                    "summary": f"node {wait.node_id!r} of run {run.id} had no decision within "
                    f"{seconds} s: {wait_status} by its on_timeout",
                    "verb": f"{wait_status} on timeout",
                    "dag_run_id": str(run.id),
                    "node_id": wait.node_id,
                },
            )
            node_complete(
                run=run,
                node_id=wait.node_id,
                status=status,
                result={**decisions_result(wait), "timed_out": True},
                error=error,
            )
            ended += 1
    return ended
