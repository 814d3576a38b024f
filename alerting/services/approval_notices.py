"""The announcement of an approval node's wait: who is told, and the message with a signed
one-time link per approver (dags.services.approval_links).

It goes to the DAG's owner (`owner`: a member's mail or a notification target of the tenant,
a Slack channel for instance), with a link for each member who may decide; and to each of
those members by mail, with their own link only. A link decides nothing without the sign-in
of the approver it names, so a channel that every member reads is a fine place for all of
them. The run's triggerer gets no link: they may not decide."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from alerting.models import ChannelKind
from alerting.services.delivery import Target
from alerting.services.owners import owner_targets
from dags.approval_models import ApprovalWait
from dags.approval_selectors import approval_eligible_members
from dags.services.approval_links import approval_link_token


def approval_link_url(token: str) -> str:
    return f"{settings.ALERTS['BASE_URL']}/dashboard/approvals/{token}"


def approval_announcement(
    wait: ApprovalWait,
) -> tuple[list[tuple[Target, dict[str, Any]]], list[str]]:
    """([(receiver, message)], problems): what to send, and why some could not be sent."""
    run = wait.run
    dag = run.dag
    approvers = [
        membership.user
        for membership in approval_eligible_members(
            tenant_id=wait.tenant_id, role=wait.role, usernames=wait.usernames
        ).order_by("user__username")
        if f"user:{membership.user.get_username()}" != run.triggered_by
    ]
    links = {
        user.get_username(): approval_link_url(approval_link_token(wait=wait, user_id=user.pk))
        for user in approvers
    }
    who = f"an {wait.role} or higher" if wait.role else ", ".join(wait.usernames)
    base = {
        "event": "approval_requested",
        "title": f"Approval needed: {dag.name} / {wait.node_id}",
        "tenant": str(wait.tenant_id),
        "dag_id": str(dag.id),
        "dag_run_id": str(run.id),
        "node_id": wait.node_id,
        "approval_id": str(wait.id),
        "required": wait.required,
        "deadline": wait.deadline.isoformat().replace("+00:00", "Z"),
        "url": f"{settings.ALERTS['BASE_URL']}/dashboard/dags/{dag.id}/runs/{run.id}",
    }
    head = (f"{wait.message}\n\n" if wait.message else "") + (
        f"{wait.required} approval(s) of {who} needed by "
        f"{wait.deadline:%Y-%m-%d %H:%M} UTC (then: {wait.on_timeout})."
        + (f" Triggered by {run.triggered_by}, who may not decide." if run.triggered_by else "")
    )

    def text_for(names: list[str]) -> str:
        lines = [f"Approve or reject as {name}: {links[name]}" for name in names]
        return "\n".join([head, *lines])

    sends: list[tuple[Target, dict[str, Any]]] = []
    targets, problems = owner_targets(tenant_id=wait.tenant_id, owner=dag.owner)
    for target in targets:
        sends.append((target, {**base, "text": text_for(list(links)), "links": links}))
    for user in approvers:
        name = user.get_username()
        personal = Target(ChannelKind.EMAIL, user.email, tenant_id=str(wait.tenant_id))
        if user.email and all(personal.target != target.target for target, _ in sends):
            sends.append(
                (personal, {**base, "text": text_for([name]), "links": {name: links[name]}})
            )
    return sends, problems
