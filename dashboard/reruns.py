"""The run page's Re-run and "Re-run with parameters…": the API's rerun (`runs.reruns`), with
the parameters typed as JSON and checked as the API checks them (`RerunInput`). A refusal
(bad JSON, a run still going, over a cap or quota) is said on the run's page; nothing runs."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html

from api.parsers import JsonRefused, json_loads_bounded
from api.views_reruns import RerunInput
from runs.reruns import execution_rerun
from scheduler_app.errors import DomainError
from scheduler_app.models import TaskExecution


def _form_input(request: HttpRequest) -> tuple[dict[str, Any] | None, str]:
    """The rerun's body from the form; (None, what is wrong) when it does not pass."""
    body: dict[str, Any] = {"note": request.POST.get("note", "")}
    text = request.POST.get("parameters")
    if text is not None:  # the "with parameters" form: its textarea, blank meaning {}
        try:
            body["parameters"] = json_loads_bounded(text) if text.strip() else {}
        except JsonRefused as error:
            return None, f"parameters: {error}"
        except json.JSONDecodeError as error:
            return None, (
                f"parameters: not valid JSON: {error.msg} (line {error.lineno}, "
                f"column {error.colno})"
            )
    checked = RerunInput(data=body)
    if not checked.is_valid():
        field, problems = next(iter(checked.errors.items()))
        if field == "parameters":
            return None, 'parameters: must be a JSON object, for example {"day": "2030-01-01"}'
        return None, f"{field}: {' '.join(str(p) for p in problems)}"
    return dict(checked.validated_data), ""


def execution_rerun_from_page(request: HttpRequest, execution: TaskExecution) -> HttpResponse:
    body, problem = _form_input(request)
    if body is None:
        messages.error(request, f"Nothing was re-run. {problem}")
        return redirect("dashboard:execution", execution_id=execution.id)
    try:
        rerun = execution_rerun(
            execution=execution,
            parameters=body.get("parameters"),
            note=body["note"],
            actor=f"user:{request.user.get_username()}",
        )
    except DomainError as error:
        where = f" ({error.field})" if error.field else ""
        messages.error(request, f"Nothing was re-run{where}: {error.message}")
        return redirect("dashboard:execution", execution_id=execution.id)
    messages.success(
        request,
        format_html(
            'Re-running {}: new run <a href="{}">{}</a> (re-run of {})',
            execution.task.name,
            reverse("dashboard:execution", args=[rerun.id]),
            str(rerun.id)[:8],
            str(execution.id)[:8],
        ),
    )
    return redirect("dashboard:execution", execution_id=rerun.id)
