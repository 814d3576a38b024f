"""Approval nodes' rows: the wait of a node for its approvers, and each approver's decision.

Kept out of `dags/models.py` (one concern a module); that module imports these so Django
finds them in the `dags` app. References to the run go by the app label ("dags.DagRun"), so
this module does not import `dags.models` back.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from dags.choices import ApprovalInterface, ApprovalVerdict, ApprovalWaitStatus
from scheduler_app.models import Tenant
from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class ApprovalWait(models.Model):
    """An approval node of a run (one attempt of it), while it waits and after: who may
    decide, how many approvals release it, and until when."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("dags.DagRun", on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    # The node's attempt in its run (DagNodeState.attempt_number): a re-run waits afresh, and
    # the decisions of the attempt it replaced do not count for it.
    attempt_number = models.PositiveSmallIntegerField(default=1)
    # Who may decide: a member role (and every higher one), or named members; see
    # dags.spec_approval.
    role = models.CharField(max_length=16, blank=True, default="")
    usernames = models.JSONField(default=list, blank=True)
    required = models.PositiveSmallIntegerField()
    on_timeout = models.CharField(max_length=16)
    message = models.TextField(blank=True, default="")
    started_at = models.DateTimeField()
    deadline = models.DateTimeField()
    status = models.CharField(
        max_length=16, choices=ApprovalWaitStatus.choices, default=ApprovalWaitStatus.WAITING
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        ordering = ["run", "node_id", "attempt_number"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "node_id", "attempt_number"], name="uniq_approval_wait_attempt"
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "started_at"],
                name="idx_approval_wait_open",
                condition=Q(status="waiting"),
            ),
            models.Index(
                fields=["deadline"],
                name="idx_approval_wait_deadline",
                condition=Q(status="waiting"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id} waits for {self.required} approval(s)"


class ApprovalDecision(models.Model):
    """One approver's word on one wait. A user decides a wait once (the unique key: a second
    click, a second tab or a reused link cannot count twice)."""

    id = models.BigAutoField(primary_key=True)
    wait = models.ForeignKey(ApprovalWait, on_delete=models.CASCADE, related_name="decisions")
    # Null once the account is deleted: the decision stays, under the name it was made by.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The user name at the time (the audit log's and the result's spelling).
    username = models.CharField(max_length=150)
    verdict = models.CharField(max_length=8, choices=ApprovalVerdict.choices)
    comment = models.TextField(blank=True, default="")
    via = models.CharField(max_length=16, choices=ApprovalInterface.choices)
    # The signed link's nonce, when the decision came through one: a link works once.
    link_nonce = models.CharField(max_length=32, null=True, blank=True, unique=True)
    decided_at = models.DateTimeField()

    class Meta:
        ordering = ["wait", "decided_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["wait", "user"], name="uniq_approval_decision_user"),
        ]

    def __str__(self) -> str:
        return f"{self.username} {self.verdict}s {self.wait_id}"
