"""The buttons of the DAG pages: trigger, pause and resume a DAG; cancel and re-run a run.
Allowed by the API's rules for the same endpoints (POST, then back to the page)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from api.dags import views as api
from api.dags.serializers import DagTriggerInput
from api.parsers import JsonRefused, json_loads_bounded
from dags import selectors as dag_selectors
from dags.services import definitions, runs
from dashboard.actions import posted_note, say_with_links, tenant_object
from dashboard.roles import ApiRule, follows_api
from scheduler_app.errors import DomainError


def _dag_run_get(*, tenant, dag_id: str, run_id: str):
    dag = dag_selectors.dag_get(tenant=tenant, dag_id=dag_id)
    return dag_selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)


def _trigger_parameters(text: str) -> tuple[dict | None, str]:
    """The run's parameters typed as a JSON object, checked as the API's trigger checks them
    (DagTriggerInput); (None, "") when left blank, else (None, what is wrong, with its line)."""
    if not text.strip():
        return None, ""
    try:
        parsed = json_loads_bounded(text)
    except JsonRefused as error:
        return None, str(error)
    except json.JSONDecodeError as error:
        return None, f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    body = DagTriggerInput(data={"parameters": parsed})
    if not body.is_valid():
        return None, 'must be a JSON object, for example {"date": "2030-01-01"}'
    return body.validated_data.get("parameters"), ""


@login_required
@follows_api(
    actions={
        "trigger": ApiRule(api.DagTriggerView, "POST"),
        "pause": ApiRule(api.DagPauseView, "POST"),
        "resume": ApiRule(api.DagResumeView, "POST"),
    }
)
def dag_action(request: HttpRequest, dag_id: str, action: str) -> HttpResponse:
    dag = tenant_object(request, dag_selectors.dag_get, dag_id=dag_id)
    if action == "trigger":
        parameters, problem = _trigger_parameters(request.POST.get("parameters", ""))
        if problem:
            messages.error(request, f"Nothing was triggered. Parameters: {problem}")
            return redirect("dashboard:dag", dag_id=dag.id)
        try:
            run = runs.dag_trigger(
                dag=dag,
                parameters=parameters,
                triggered_by=f"user:{request.user.get_username()}",
            )
        except DomainError as error:  # e.g. a DAG without a version
            messages.error(request, error.message)
            return redirect("dashboard:dag", dag_id=dag.id)
        say_with_links(
            request,
            "Triggered {dag}: {run} ({status})",
            dag=(dag.name, None),
            run=(f"run {str(run.id)[:8]}", reverse("dashboard:dag-run", args=[dag.id, run.id])),
            status=(run.status.replace("_", " "), None),
        )
        return redirect("dashboard:dag-run", dag_id=dag.id, run_id=run.id)
    if action not in ("pause", "resume"):
        raise Http404("unknown action")
    definitions.dag_set_paused(
        dag=dag,
        paused=action == "pause",
        note=posted_note(request),
        paused_by=f"user:{request.user.get_username()}",
    )
    messages.success(request, f"{'Paused' if dag.paused else 'Resumed'} {dag.name}")
    return redirect("dashboard:dag", dag_id=dag.id)


@login_required
@follows_api(
    actions={
        "cancel": ApiRule(api.DagRunCancelView, "POST"),
        "rerun": ApiRule(api.DagRunRetryView, "POST"),
    }
)
def dag_run_action(request: HttpRequest, dag_id: str, run_id: str, action: str) -> HttpResponse:
    run = tenant_object(request, _dag_run_get, dag_id=dag_id, run_id=run_id)
    try:
        run = (
            runs.dag_run_cancel(run=run, note=posted_note(request))
            if action == "cancel"
            else runs.dag_run_rerun(run=run, triggered_by=f"user:{request.user.get_username()}")
        )
    except DomainError as error:  # it had already ended / is not re-runnable
        messages.error(request, error.message)
    else:
        say_with_links(
            request,
            "{run}: {status}",
            run=(f"Run {str(run.id)[:8]}", reverse("dashboard:dag-run", args=[run.dag_id, run.id])),
            status=(run.status.replace("_", " "), None),
        )
    return redirect("dashboard:dag-run", dag_id=run.dag_id, run_id=run.id)
