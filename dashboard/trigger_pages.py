"""Trigger a task or a DAG with parameters: the form of its declared parameters
(dashboard.run_parameters), opened as a dialog on the task's or the DAG's page, and the same
form as a page of its own (what the dialog's button links to without JavaScript, and where a
refused form is shown again with its errors). Allowed as POST .../trigger is in the API; the
run is started by the service the API calls, and the trigger is audited."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from api import views as api
from api.dags import views as dag_api
from dags import selectors as dag_selectors
from dags.services import runs
from dashboard.actions import say_with_links, tenant_object
from dashboard.naming import is_dag_node_task
from dashboard.roles import ApiRule, follows_api
from dashboard.run_parameters import form_refused, parameters_form, parameters_from_post
from dashboard.views import page_context
from scheduler_app import selectors
from scheduler_app.errors import DomainError
from scheduler_app.services import task_definitions

TASK_TRIGGER = ApiRule(api.TaskTriggerView, "POST")
DAG_TRIGGER = ApiRule(dag_api.DagTriggerView, "POST")


def dag_declared_parameters(dag) -> dict[str, Any]:
    version = dag_selectors.dag_version_get(dag=dag)
    return dict((version.spec.get("parameters") if version else None) or {})


def _page(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    context.update(page_context(request))
    return render(request, "dashboard/trigger.html", context, status=status)


@login_required
@follows_api(GET=TASK_TRIGGER, HEAD=TASK_TRIGGER, POST=TASK_TRIGGER)
def task_trigger_page(request: HttpRequest, task_id: str) -> HttpResponse:
    task = tenant_object(request, selectors.task_get, task_id=task_id)
    if is_dag_node_task(task):
        return redirect("dashboard:task", task_id=task.id)
    context: dict[str, Any] = {
        "target": task,
        "kind": "task",
        "back": reverse("dashboard:task", args=[task.id]),
    }
    if request.method != "POST":
        return _page(request, {**context, "form": parameters_form(task.parameters)})
    form, parameters = parameters_from_post(task.parameters, request.POST)
    if parameters is not None:
        try:
            execution = task_definitions.task_trigger(task=task, parameters=parameters)
        except DomainError as error:  # the size cap, a secret reference
            form_refused(form, error.message)
        else:
            say_with_links(
                request,
                "Triggered {task} with parameters: run {run}",
                task=(task.name, None),
                run=(str(execution.id)[:8], reverse("dashboard:execution", args=[execution.id])),
            )
            return redirect("dashboard:execution", execution_id=execution.id)
    return _page(request, {**context, "form": form}, status=400)


@login_required
@follows_api(GET=DAG_TRIGGER, HEAD=DAG_TRIGGER, POST=DAG_TRIGGER)
def dag_trigger_page(request: HttpRequest, dag_id: str) -> HttpResponse:
    dag = tenant_object(request, dag_selectors.dag_get, dag_id=dag_id)
    declared = dag_declared_parameters(dag)
    context: dict[str, Any] = {
        "target": dag,
        "kind": "dag",
        "back": reverse("dashboard:dag", args=[dag.id]),
    }
    if request.method != "POST":
        return _page(request, {**context, "form": parameters_form(declared)})
    form, parameters = parameters_from_post(declared, request.POST)
    if parameters is not None:
        try:
            run = runs.dag_trigger(
                dag=dag,
                parameters=parameters,
                triggered_by=f"user:{request.user.get_username()}",
            )
        except DomainError as error:
            form_refused(form, error.message)
        else:
            say_with_links(
                request,
                "Triggered {dag} with parameters: {run} ({status})",
                dag=(dag.name, None),
                run=(f"run {str(run.id)[:8]}", reverse("dashboard:dag-run", args=[dag.id, run.id])),
                status=(run.status.replace("_", " "), None),
            )
            return redirect("dashboard:dag-run", dag_id=dag.id, run_id=run.id)
    return _page(request, {**context, "form": form}, status=400)
