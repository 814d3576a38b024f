"""Dashboard buttons: POST only, CSRF-protected, operator role, calling the existing services."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from dags import selectors as dag_selectors
from dags.api.serializers import DagTriggerInput
from scheduler_app import selectors
from scheduler_app.choices import Role
from scheduler_app.dashboard.naming import is_dag_node_task
from scheduler_app.dashboard.tenancy import dashboard_membership
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.services import dead_letters, task_definitions

WRITE_ROLES = (Role.OPERATOR, Role.ADMIN)


def _say(request: HttpRequest, template: str, **parts: tuple[str, str | None]) -> None:
    """A success message whose named parts link to what they name ("Triggered report-export:
    run 1ef59a75" -> the run). Escaped by format_html; the template is ours."""
    rendered = {
        name: format_html('<a href="{}">{}</a>', url, text) if url else format_html("{}", text)
        for name, (text, url) in parts.items()
    }
    messages.success(request, format_html(template, **rendered))


def _operator_object(request: HttpRequest, getter, **lookup):
    """The object a button acts on, for operators and admins of its tenant only."""
    membership = dashboard_membership(request)
    if membership.role not in WRITE_ROLES:
        raise PermissionDenied("operators only")
    try:
        return getter(tenant=membership.tenant, **lookup)
    except NotFound as error:
        raise Http404(str(error)) from error


@login_required
@require_POST
def task_action(request: HttpRequest, task_id: str, action: str) -> HttpResponse:
    task = _operator_object(request, selectors.task_get, task_id=task_id)
    if is_dag_node_task(task):
        raise PermissionDenied("this task runs a DAG node; trigger or pause its DAG instead")
    if action == "trigger":
        execution = task_definitions.task_trigger(task=task)
        _say(
            request,
            "Triggered {task}: run {run}",
            task=(task.name, None),
            run=(str(execution.id)[:8], reverse("dashboard:execution", args=[execution.id])),
        )
    elif action == "pause":
        task_definitions.task_pause(task=task)
        messages.success(request, f"Paused {task.name}")
    elif action == "resume":
        task_definitions.task_resume(task=task)
        messages.success(request, f"Resumed {task.name}")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:task", task_id=task.id)


@login_required
@require_POST
def dead_letter_action(request: HttpRequest, execution_id: str, action: str) -> HttpResponse:
    execution = _operator_object(request, selectors.dead_letter_get, execution_id=execution_id)
    if action == "retry":
        link = dag_selectors.dag_node_of_execution(tenant=execution.tenant, execution=execution)
        if link is not None:
            return _dag_node_retry(request, execution, link)
        retry = dead_letters.dead_letter_retry(
            execution=execution, triggered_by=f"user:{request.user.get_username()}"
        )
        if retry is None:
            messages.success(request, "Already retried")
        else:
            _say(
                request,
                "Retrying {task}: run {run}",
                task=(execution.task.name, reverse("dashboard:task", args=[execution.task_id])),
                run=(str(retry.id)[:8], reverse("dashboard:execution", args=[retry.id])),
            )
    elif action == "delete":
        dead_letters.dead_letter_delete(execution=execution)
        messages.success(request, "Removed from the dead-letter queue")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:dlq")


def _dag_node_retry(request: HttpRequest, execution, link) -> HttpResponse:
    """A DAG node's dead letter is retried inside its run (dags.services.dead_letters)."""
    from dags.services.dead_letters import dag_node_dead_letter_retry

    try:
        run = dag_node_dead_letter_retry(
            execution=execution, link=link, triggered_by=f"user:{request.user.get_username()}"
        )
    except DomainError as error:  # the run is still going, or gone
        messages.error(request, error.message)
        return redirect("dashboard:dlq")
    if run is None:
        messages.success(request, "Already retried")
        return redirect("dashboard:dlq")
    _say(
        request,
        "Re-running node {node} inside {run}",
        node=(link.node_id, None),
        run=(
            f"run {str(run.id)[:8]} of {link.run.dag.name}",
            reverse("dashboard:dag-run", args=[run.dag_id, run.id]),
        ),
    )
    return redirect("dashboard:dlq")


@login_required
@require_POST
def execution_action(request: HttpRequest, execution_id: str, action: str) -> HttpResponse:
    """Cancel: a waiting run never starts; a running one has its process group killed."""
    from scheduler_app.services.fleet import execution_cancel

    execution = _operator_object(request, selectors.execution_get, execution_id=execution_id)
    if action != "cancel":
        raise Http404("unknown action")
    try:
        outcome = execution_cancel(execution=execution)
    except DomainError as error:  # it had already ended
        messages.error(request, error.message)
    else:
        _say(
            request,
            "{run}: {outcome}",
            run=(
                f"Run {str(execution.id)[:8]}",
                reverse("dashboard:execution", args=[execution.id]),
            ),
            outcome=(outcome, None),
        )
    return redirect("dashboard:execution", execution_id=execution.id)


def _dag_run_get(*, tenant, dag_id: str, run_id: str):
    dag = dag_selectors.dag_get(tenant=tenant, dag_id=dag_id)
    return dag_selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)


def _trigger_parameters(text: str) -> tuple[dict | None, str]:
    """The run's parameters typed as a JSON object, checked as the API's trigger checks them
    (DagTriggerInput); (None, "") when left blank, else (None, what is wrong, with its line)."""
    if not text.strip():
        return None, ""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    body = DagTriggerInput(data={"parameters": parsed})
    if not body.is_valid():
        return None, 'must be a JSON object, for example {"date": "2030-01-01"}'
    return body.validated_data.get("parameters"), ""


@login_required
@require_POST
def dag_action(request: HttpRequest, dag_id: str, action: str) -> HttpResponse:
    from dags.services import definitions, runs

    dag = _operator_object(request, dag_selectors.dag_get, dag_id=dag_id)
    if action == "trigger":
        parameters, problem = _trigger_parameters(request.POST.get("parameters", ""))
        if problem:
            messages.error(request, f"Nothing was triggered. Parameters: {problem}")
            return redirect("dashboard:dag", dag_id=dag.id)
        try:
            run = runs.dag_trigger(dag=dag, parameters=parameters)
        except DomainError as error:  # e.g. a DAG without a version
            messages.error(request, error.message)
            return redirect("dashboard:dag", dag_id=dag.id)
        _say(
            request,
            "Triggered {dag}: {run} ({status})",
            dag=(dag.name, None),
            run=(f"run {str(run.id)[:8]}", reverse("dashboard:dag-run", args=[dag.id, run.id])),
            status=(run.status.replace("_", " "), None),
        )
        return redirect("dashboard:dag-run", dag_id=dag.id, run_id=run.id)
    if action not in ("pause", "resume"):
        raise Http404("unknown action")
    definitions.dag_set_paused(dag=dag, paused=action == "pause")
    messages.success(request, f"{'Paused' if dag.paused else 'Resumed'} {dag.name}")
    return redirect("dashboard:dag", dag_id=dag.id)


@login_required
@require_POST
def dag_run_action(request: HttpRequest, dag_id: str, run_id: str, action: str) -> HttpResponse:
    from dags.services import runs

    run = _operator_object(request, _dag_run_get, dag_id=dag_id, run_id=run_id)
    if action not in ("cancel", "rerun"):
        raise Http404("unknown action")
    try:
        run = (
            runs.dag_run_cancel(run=run)
            if action == "cancel"
            else runs.dag_run_rerun(run=run, triggered_by=f"user:{request.user.get_username()}")
        )
    except DomainError as error:  # it had already ended / is not re-runnable
        messages.error(request, error.message)
    else:
        _say(
            request,
            "{run}: {status}",
            run=(f"Run {str(run.id)[:8]}", reverse("dashboard:dag-run", args=[run.dag_id, run.id])),
            status=(run.status.replace("_", " "), None),
        )
    return redirect("dashboard:dag-run", dag_id=run.dag_id, run_id=run.id)
