"""The task form pages: edit a task of the tenant, or create one. Allowed by the API's rules
for the same writes (POST /tasks, PUT /tasks/<id>), the form's page included; another
tenant's task is not found. Validation, write and audit: dashboard.task_form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from api import views as api
from dashboard.naming import is_dag_node_task
from dashboard.roles import ApiRule, follows_api
from dashboard.task_flow_fields import pool_choices_set
from dashboard.task_form import (
    TaskForm,
    initial_for,
    task_save_from_form,
    timezone_names,
)
from dashboard.tenancy import dashboard_membership
from dashboard.views import page_context
from scheduler_app import selectors
from scheduler_app.errors import NotFound
from scheduler_app.models import TaskDefinition

# The form's page is for who may send it.
CREATE = ApiRule(api.TaskListView, "POST")
UPDATE = ApiRule(api.TaskDetailView, "PUT")


def _form_page(
    request: HttpRequest, form: TaskForm, task: TaskDefinition | None, status: int = 200
) -> HttpResponse:
    context = page_context(request)
    pool_choices_set(form, tenant=context["tenant"])
    context.update(form=form, task=task, timezones=timezone_names())
    return render(request, "dashboard/task_form.html", context, status=status)


def _saved(request: HttpRequest, form: TaskForm, membership, task) -> HttpResponse:
    saved = task_save_from_form(form, tenant=membership.tenant, task=task, user=request.user)
    if saved is None:
        return _form_page(request, form, task, status=400)
    messages.success(request, f"Saved {saved.name}")
    return redirect("dashboard:task", task_id=saved.id)


@login_required
@follows_api(GET=UPDATE, HEAD=UPDATE, POST=UPDATE)
def task_edit(request: HttpRequest, task_id: str) -> HttpResponse:
    membership = dashboard_membership(request)
    try:
        task = selectors.task_get(tenant=membership.tenant, task_id=task_id)
    except NotFound as error:
        raise Http404(str(error)) from error
    if is_dag_node_task(task):
        # Its DAG's definition is its source: a change here would be lost at the next version.
        raise PermissionDenied("this task runs a DAG node; edit its DAG instead")
    if request.method == "POST":
        return _saved(request, TaskForm(request.POST), membership, task)
    return _form_page(request, TaskForm(initial=initial_for(task)), task)


@login_required
@follows_api(GET=CREATE, HEAD=CREATE, POST=CREATE)
def task_new(request: HttpRequest) -> HttpResponse:
    membership = dashboard_membership(request)
    if request.method == "POST":
        return _saved(request, TaskForm(request.POST), membership, None)
    return _form_page(request, TaskForm(initial=initial_for(None)), None)
