"""Dashboard buttons: POST only, CSRF-protected, operator role, calling the existing services."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dags import selectors as dag_selectors
from scheduler_app import selectors
from scheduler_app.choices import Role
from scheduler_app.dashboard.tenancy import dashboard_membership
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.services import dead_letters, tasks

WRITE_ROLES = (Role.OPERATOR, Role.ADMIN)


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
    if action == "trigger":
        execution = tasks.task_trigger(task=task)
        messages.success(request, f"Triggered {task.name}: execution {execution.id}")
    elif action == "pause":
        tasks.task_pause(task=task)
        messages.success(request, f"Paused {task.name}")
    elif action == "resume":
        tasks.task_resume(task=task)
        messages.success(request, f"Resumed {task.name}")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:task", task_id=task.id)


@login_required
@require_POST
def dead_letter_action(request: HttpRequest, execution_id: str, action: str) -> HttpResponse:
    execution = _operator_object(request, selectors.dead_letter_get, execution_id=execution_id)
    if action == "retry":
        retry = dead_letters.dead_letter_retry(execution=execution)
        messages.success(request, f"Retrying as {retry.id}" if retry else "Already retried")
    elif action == "delete":
        dead_letters.dead_letter_delete(execution=execution)
        messages.success(request, "Removed from the dead-letter queue")
    else:
        raise Http404("unknown action")
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
        messages.success(request, f"Execution {execution.id}: {outcome}")
    return redirect("dashboard:execution", execution_id=execution.id)


def _dag_run_get(*, tenant, dag_id: str, run_id: str):
    dag = dag_selectors.dag_get(tenant=tenant, dag_id=dag_id)
    return dag_selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)


@login_required
@require_POST
def dag_action(request: HttpRequest, dag_id: str, action: str) -> HttpResponse:
    from dags.services import definitions, runs

    dag = _operator_object(request, dag_selectors.dag_get, dag_id=dag_id)
    if action == "trigger":
        try:
            run = runs.dag_trigger(dag=dag)
        except DomainError as error:  # e.g. a DAG without a version
            messages.error(request, error.message)
            return redirect("dashboard:dag", dag_id=dag.id)
        messages.success(request, f"Triggered {dag.name}: run {run.id} ({run.status})")
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
        run = runs.dag_run_cancel(run=run) if action == "cancel" else runs.dag_run_rerun(run=run)
    except DomainError as error:  # it had already ended / is not re-runnable
        messages.error(request, error.message)
    else:
        messages.success(request, f"Run {run.id}: {run.status}")
    return redirect("dashboard:dag-run", dag_id=run.dag_id, run_id=run.id)
