"""Dashboard buttons: POST only, CSRF-protected, allowed by the API's role rules for the
endpoint each stands for (dashboard.roles), calling the existing services."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html

from api import views as api
from api.views_reruns import ExecutionRerunView
from dags import selectors as dag_selectors
from dags.services.dead_letters import dag_node_dead_letter_retry
from dashboard.naming import is_dag_node_task
from dashboard.reruns import execution_rerun_from_page
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from runs import dead_letters
from scheduler_app import selectors
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.services import task_definitions
from scheduler_app.services.fleet import execution_cancel


def say_with_links(request: HttpRequest, template: str, **parts: tuple[str, str | None]) -> None:
    """A success message whose named parts link to what they name ("Triggered report-export:
    run 1ef59a75" -> the run). Escaped by format_html; the template is ours."""
    rendered = {
        name: format_html('<a href="{}">{}</a>', url, text) if url else format_html("{}", text)
        for name, (text, url) in parts.items()
    }
    messages.success(request, format_html(template, **rendered))


def posted_note(request: HttpRequest) -> str:
    """The reason typed next to a button (the API's `note`), at most what the API takes."""
    return request.POST.get("note", "").strip()[:2000]


def tenant_object(request: HttpRequest, getter, **lookup):
    """The object a button acts on, in the tenant the dashboard shows (another tenant's is a
    404). Who may press the button was decided before, by @follows_api."""
    membership = dashboard_membership(request)
    try:
        return getter(tenant=membership.tenant, **lookup)
    except NotFound as error:
        raise Http404(str(error)) from error


@login_required
@follows_api(
    actions={
        "trigger": ApiRule(api.TaskTriggerView, "POST"),
        "pause": ApiRule(api.TaskPauseView, "POST"),
        "resume": ApiRule(api.TaskResumeView, "POST"),
    }
)
def task_action(request: HttpRequest, task_id: str, action: str) -> HttpResponse:
    task = tenant_object(request, selectors.task_get, task_id=task_id)
    if is_dag_node_task(task):
        raise PermissionDenied("this task runs a DAG node; trigger or pause its DAG instead")
    if action == "trigger":
        execution = task_definitions.task_trigger(task=task)
        say_with_links(
            request,
            "Triggered {task}: run {run}",
            task=(task.name, None),
            run=(str(execution.id)[:8], reverse("dashboard:execution", args=[execution.id])),
        )
    elif action == "pause":
        task_definitions.task_pause(
            task=task,
            note=posted_note(request),
            paused_by=f"user:{request.user.get_username()}",
        )
        messages.success(request, f"Paused {task.name}")
    elif action == "resume":
        task_definitions.task_resume(task=task)
        messages.success(request, f"Resumed {task.name}")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:task", task_id=task.id)


@login_required
@follows_api(
    actions={
        "retry": ApiRule(api.DeadLetterRetryView, "POST"),
        # Admins only, as DELETE /api/v1/admin/dlq/<id>: it takes the run out of the queue.
        "delete": ApiRule(api.DeadLetterDetailView, "DELETE"),
    }
)
def dead_letter_action(request: HttpRequest, execution_id: str, action: str) -> HttpResponse:
    execution = tenant_object(request, selectors.dead_letter_get, execution_id=execution_id)
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
            say_with_links(
                request,
                "Retrying {task}: run {run}",
                task=(execution.task.name, reverse("dashboard:task", args=[execution.task_id])),
                run=(str(retry.id)[:8], reverse("dashboard:execution", args=[retry.id])),
            )
    elif action == "delete":
        dead_letters.dead_letter_delete(execution=execution, note=posted_note(request))
        messages.success(request, "Removed from the dead-letter queue")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:dlq")


def _dag_node_retry(request: HttpRequest, execution, link) -> HttpResponse:
    """A DAG node's dead letter is retried inside its run (dags.services.dead_letters)."""

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
    say_with_links(
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
@follows_api(
    actions={
        "cancel": ApiRule(api.ExecutionCancelView, "POST"),
        "rerun": ApiRule(ExecutionRerunView, "POST"),
    }
)
def execution_action(request: HttpRequest, execution_id: str, action: str) -> HttpResponse:
    """Cancel: a waiting run never starts; a running one has its process group killed.
    Re-run: an ended run again, with its parameters or edited ones (dashboard.reruns)."""

    execution = tenant_object(request, selectors.execution_get, execution_id=execution_id)
    if action == "rerun":
        return execution_rerun_from_page(request, execution)
    try:
        outcome = execution_cancel(execution=execution, note=posted_note(request))
    except DomainError as error:  # it had already ended
        messages.error(request, error.message)
    else:
        say_with_links(
            request,
            "{run}: {outcome}",
            run=(
                f"Run {str(execution.id)[:8]}",
                reverse("dashboard:execution", args=[execution.id]),
            ),
            outcome=(outcome, None),
        )
    return redirect("dashboard:execution", execution_id=execution.id)
