"""The DAG run page's node actions: clear a node (alone, with its upstream or its downstream)
or mark it succeeded or failed, with a reason. They stand for the API's node clear and mark
(`api.dags.node_views`, operator) and call the same services; a run still going is refused
with the service's message, and nothing changes."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from api.dags import node_views as api
from dags.services.node_actions import MAX_NOTE, dag_node_clear, dag_node_mark
from dashboard.actions import tenant_object
from dashboard.dags.dag_actions import _dag_run_get
from dashboard.roles import ApiRule, follows_api
from scheduler_app.errors import DomainError

CLEARS = {
    "clear": {},
    "clear-upstream": {"upstream": True},
    "clear-downstream": {"downstream": True},
}
MARKS = {"mark-succeeded": "succeeded", "mark-failed": "failed"}


@login_required
@follows_api(
    actions={
        **{action: ApiRule(api.NodeClearView, "POST") for action in CLEARS},
        **{action: ApiRule(api.NodeMarkView, "POST") for action in MARKS},
    }
)
def dag_run_node_operate(
    request: HttpRequest, dag_id: str, run_id: str, node_id: str, action: str
) -> HttpResponse:
    run = tenant_object(request, _dag_run_get, dag_id=dag_id, run_id=run_id)
    note = request.POST.get("note", "")[:MAX_NOTE]
    actor = f"user:{request.user.get_username()}"
    try:
        if action in CLEARS:
            done = dag_node_clear(
                run=run, node_id=node_id, note=note, actor=actor, **CLEARS[action]
            )
            messages.success(request, f"Cleared {', '.join(done)}: the run is running again.")
        else:
            state = MARKS[action]
            reset = dag_node_mark(run=run, node_id=node_id, state=state, note=note, actor=actor)
            follow = f" {', '.join(reset)} will follow from it." if reset else ""
            messages.success(request, f"Marked {node_id} {state}.{follow}")
    except DomainError as error:  # the run is still going, the node is so already, no node
        messages.error(request, f"Nothing was changed: {error.message}")
    return redirect("dashboard:dag-run", dag_id=run.dag_id, run_id=run.id)
