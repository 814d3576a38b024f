"""Approvals in the dashboard: the run page's approval panel and its buttons, and the page a
signed link of an announcement opens.

The buttons stand for the API's decision (`NodeDecideView`, operator) and are shown only to a
member who may decide now (`approval_refusal`: eligible, not the run's triggerer, not decided
yet); the service checks it all again under the run's lock. The link page needs the sign-in
of the approver the link names (dags.services.approval_links); its GET only shows, its POST
decides, so a mail scanner fetching the link decides nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from api.dags import approval_views as api
from dags import approval_selectors
from dags import selectors as dag_selectors
from dags.approval_models import ApprovalWait
from dags.choices import ApprovalInterface, ApprovalWaitStatus
from dags.models import DagRun
from dags.services.approval_links import approval_link_decide, approval_link_open
from dags.services.approvals import MAX_COMMENT, approval_decide
from dashboard.actions import tenant_object
from dashboard.durations import format_duration
from dashboard.roles import ApiRule, follows_api
from scheduler_app.errors import DomainError


def run_approvals(*, run: DagRun, user: Any, may_press: bool) -> list[dict[str, Any]]:
    """The run page's approval panel: each wait, its decisions, the time left, and whether
    this user may decide it (`may_press`: the role rule of the button)."""
    now = timezone.now()
    panel = []
    for wait in approval_selectors.approval_waits_of_run(run=run):
        open_ = wait.status == ApprovalWaitStatus.WAITING and run.status == "running"
        refusal = approval_selectors.approval_refusal(wait=wait, user=user) if may_press else ""
        panel.append(
            {
                "wait": wait,
                "decisions": list(wait.decisions.all()),
                "approvals": sum(d.verdict == "approve" for d in wait.decisions.all()),
                "time_left": format_duration(max(0.0, (wait.deadline - now).total_seconds()))
                if open_
                else "",
                "may_decide": open_ and may_press and not refusal,
                "why_not": refusal if open_ and may_press else "",
            }
        )
    return panel


def approval_deadlines(*, run: DagRun) -> dict[str, Any]:
    """node id -> deadline of its open wait (the graph shows the time left)."""
    return {
        wait.node_id: wait.deadline
        for wait in approval_selectors.approval_waits_of_run(run=run)
        if wait.status == ApprovalWaitStatus.WAITING
    }


def _dag_run_get(*, tenant, dag_id: str, run_id: str) -> DagRun:
    dag = dag_selectors.dag_get(tenant=tenant, dag_id=dag_id)
    return dag_selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)


@login_required
@follows_api(
    actions={
        "approve": ApiRule(api.NodeDecideView, "POST"),
        "reject": ApiRule(api.NodeDecideView, "POST"),
    }
)
def dag_run_node_action(
    request: HttpRequest, dag_id: str, run_id: str, node_id: str, action: str
) -> HttpResponse:
    run = tenant_object(request, _dag_run_get, dag_id=dag_id, run_id=run_id)
    try:
        wait = approval_selectors.approval_of_node(tenant=run.tenant, run=run, node_id=node_id)
        decided = approval_decide(
            wait_id=wait.id,
            user=request.user,
            verdict=action,
            comment=request.POST.get("comment", "")[:MAX_COMMENT],
            via=ApprovalInterface.DASHBOARD,
        )
    except DomainError as error:  # not an approval node, closed, not theirs to decide
        messages.error(request, f"Nothing was decided: {error.message}")
    else:
        done = "Approved" if action == "approve" else "Rejected"
        outcome = f" The node is {decided.wait.status}." if decided.released else ""
        messages.success(request, f"{done} {node_id}.{outcome}")
    return redirect("dashboard:dag-run", dag_id=run.dag_id, run_id=run.id)


def _link_page(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    return render(request, "dashboard/approval_link.html", context, status=status)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def approval_link(request: HttpRequest, token: str) -> HttpResponse:
    """The signed link's page (its token is the credential, with the approver's sign-in)."""
    try:
        opened = approval_link_open(token=token, user=request.user)
    except DomainError as refused:  # not valid, someone else's, used, closed
        return _link_page(request, {"problem": refused.message}, refused.status_code)
    wait: ApprovalWait = opened.wait
    if request.method == "POST":
        verdict = request.POST.get("verdict", "")
        try:
            decided = approval_link_decide(
                token=token,
                user=request.user,
                verdict=verdict,
                comment=request.POST.get("comment", "")[:MAX_COMMENT],
            )
        except DomainError as refused:
            return _link_page(request, {"problem": refused.message}, refused.status_code)
        return _link_page(request, {"wait": decided.wait, "decided": decided.decision})
    return _link_page(request, {"wait": wait, "run": wait.run})
