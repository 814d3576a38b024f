"""Create and edit a DAG in the dashboard: its definition as YAML or JSON text, checked by the
same code as the API (`dags.services.definitions`: POST /dags, PUT /dags/<id>), a refusal
shown with the line of the text it concerns. Allowed by the API's rules for the same writes
(POST /dags, PUT /dags/<id>); another tenant's DAG is not found."""

from __future__ import annotations

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html

from api.dags import views as api
from api.parsers import depth_error_message, json_depth_exceeds
from dags import selectors as dag_selectors
from dags.models import Dag
from dags.services import definitions
from dashboard.roles import ApiRule, follows_api
from dashboard.spec_lines import line_of_field, parse_definition
from dashboard.tenancy import dashboard_membership
from dashboard.views import page_context
from scheduler_app.errors import DomainError, NotFound

EXAMPLE = """dag: nightly-etl
description: Extract, then transform and load.
schedule: {type: cron, expression: "0 3 * * *", timezone: UTC}
tasks:
  - id: extract
    handler: {type: python, callable: echo}
  - id: load
    depends_on: [extract]
    handler: {type: python, callable: noop}
"""


# The form's page is for who may send it.
CREATE = ApiRule(api.DagListView, "POST")
UPDATE = ApiRule(api.DagDetailView, "PUT")


def _form(request, *, dag: Dag | None, text: str, error=None, status: int = 200):
    context = page_context(request)
    context.update(dag=dag, text=text, error=error)
    return render(request, "dashboard/dag_form.html", context, status=status)


def _save(request: HttpRequest, *, tenant, dag: Dag | None) -> HttpResponse:
    text = request.POST.get("definition", "")
    max_bytes = settings.DEFINITION_MAX_DOCUMENT_BYTES
    raw, problem, line = parse_definition(text, max_bytes=max_bytes)
    if not problem and json_depth_exceeds(raw, settings.API_MAX_JSON_DEPTH):
        # The API refuses such a body before reading it (BoundedJSONParser): so does this.
        problem, line = depth_error_message(), None
    if problem:
        return _form(
            request, dag=dag, text=text, error={"message": problem, "line": line}, status=400
        )
    try:
        saved = (
            definitions.dag_update(dag=dag, raw=raw)
            if dag is not None
            else definitions.dag_create(tenant=tenant, raw=raw, source="dashboard")
        )
    except DomainError as refused:
        error = {
            "message": refused.message,
            "field": refused.field,
            "line": line_of_field(text, refused.field, max_bytes=max_bytes),
        }
        return _form(request, dag=dag, text=text, error=error, status=400)
    messages.success(
        request,
        format_html(
            'Saved <a href="{}">{}</a>, version {}',
            reverse("dashboard:dag", args=[saved.id]),
            saved.name,
            saved.version,
        ),
    )
    return redirect("dashboard:dag", dag_id=saved.id)


@login_required
@follows_api(GET=CREATE, HEAD=CREATE, POST=CREATE)
def dag_new(request: HttpRequest) -> HttpResponse:
    membership = dashboard_membership(request)
    if request.method == "POST":
        return _save(request, tenant=membership.tenant, dag=None)
    return _form(request, dag=None, text=EXAMPLE)


@login_required
@follows_api(GET=UPDATE, HEAD=UPDATE, POST=UPDATE)
def dag_edit(request: HttpRequest, dag_id: str) -> HttpResponse:
    membership = dashboard_membership(request)
    try:
        dag = dag_selectors.dag_get(tenant=membership.tenant, dag_id=dag_id)
    except NotFound as error:
        raise Http404(str(error)) from error
    if request.method == "POST":
        return _save(request, tenant=membership.tenant, dag=dag)
    version = dag_selectors.dag_version_get(dag=dag)
    text = yaml.safe_dump(version.spec, sort_keys=False, allow_unicode=True) if version else ""
    return _form(request, dag=dag, text=text)
