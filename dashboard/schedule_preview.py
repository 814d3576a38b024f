"""The task form's live preview: the next five fire times of the schedule being typed, in its
zone and in UTC, before anything is saved.

    GET /dashboard/schedule-preview?type=cron&expression=30+2+*+*+*&timezone=America/New_York
        [&run_at=...][&exclude=<JSON list>][&task=<id>]
    200 {"timezone": ..., "fires": [{"utc": "...Z", "local": "...-05:00"}, ...]}
    200 {"errors": [{"field": "schedule.expression", "message": "..."}], "fires": []}
    400 {"errors": [...]}   (a value over 4,096 characters: not a schedule being typed)

A schedule that does not validate is the preview's answer, not a failed request: the form
asks at every pause in typing, and half a cron expression is what a person types on the way
to a whole one (a 400 there would be a failed request in the browser's console each time).

Judged and computed by the product's own schedule code (`schedule_block_errors`, then
`schedule_for` and `schedules.preview`), so the preview says what saving would say. An
interval counts from the task's creation: with `task` (a task of the dashboard's tenant; any
other id is a 404) it is counted from that task's, as its saved schedule will be; a new
task's from now. Read-only, for any member of the tenant.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from dashboard.tenancy import dashboard_membership
from scheduler_app import selectors
from scheduler_app.errors import NotFound
from scheduler_app.services.task_spec import schedule_block_errors, schedule_fields_with_events
from scheduler_app.task_schedule import schedule_for
from schedules import preview

COUNT = 5
MAX_TEXT = 4096


def _iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _refused(field: str, message: str) -> JsonResponse:
    return JsonResponse({"errors": [{"field": field, "message": message}]}, status=400)


def _not_a_schedule(errors: list[dict[str, str]]) -> JsonResponse:
    return JsonResponse({"errors": errors, "fires": []})


@login_required
@require_safe
def schedule_preview(request: HttpRequest) -> JsonResponse:
    tenant = dashboard_membership(request).tenant
    query = request.GET
    if any(len(value) > MAX_TEXT for value in query.values()):
        return _refused("schedule", f"a value longer than {MAX_TEXT} characters")
    anchor = timezone.now()
    seed: Any = ""
    if query.get("task"):
        try:
            task = selectors.task_get(tenant=tenant, task_id=query["task"])
        except NotFound as error:
            raise Http404(str(error)) from error
        anchor, seed = task.created_at, str(task.id)
    block: dict[str, Any] = {
        "type": query.get("type", ""),
        "timezone": query.get("timezone") or "UTC",
    }
    if query.get("expression"):
        block["expression"] = query["expression"]
    if query.get("run_at"):
        block["run_at"] = query["run_at"]
    if query.get("exclude", "").strip():
        try:
            block["exclude"] = json.loads(query["exclude"])
        except json.JSONDecodeError as error:
            return _not_a_schedule(
                [{"field": "schedule.exclude", "message": f"not valid JSON: {error.msg}"}]
            )
    errors = schedule_block_errors(block, anchor=anchor)
    if errors:
        return _not_a_schedule([{"field": e.field, "message": e.message} for e in errors])
    fields = schedule_fields_with_events(block, anchor=anchor)
    schedule = schedule_for(
        schedule_type=fields["schedule_type"],
        expression=fields["schedule_expression"],
        timezone=fields["timezone"],
        run_at=fields["run_at"],
        anchor=anchor,
        seed=seed,
        exclude=fields["schedule_exclude"],
    )
    fires = preview(schedule, count=COUNT, now=timezone.now())
    return JsonResponse(
        {
            "timezone": fields["timezone"],
            "type": fields["schedule_type"],
            "fires": [{"utc": _iso(f.utc), "local": f.local.isoformat()} for f in fires],
        }
    )
