"""Start a backfill of a task or a DAG from the dashboard: a range in the target's time zone
(shown with UTC), the runs at a time, what to do with the fires that already have a run (the
reprocess policy: none / failed / all), a dry run listing each fire time with what it would
get (new run, run again, or why it is skipped) and the counts, then "Start backfill". One
form, opened as a dialog on the task's or DAG's page and served as a page of its own (without
JavaScript, or when a submit is refused). The dry run and the create are
`dags.services.backfills.backfill_plan` / `backfill_create`, which
POST /api/v1/{tasks,dags}/<id>/backfill calls, allowed to the same role; a create is audited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from api.dags.backfill_views import DagBackfillView, TaskBackfillView
from dags import selectors as dag_selectors
from dags.choices import FireOutcome
from dags.services import backfills
from dags.services.backfill_reprocess import FirePlan
from dags.services.backfills import MAX_PARALLEL, BackfillPlan
from dashboard.actions import say_with_links, tenant_object
from dashboard.naming import is_dag_node_task
from dashboard.roles import ApiRule, follows_api
from dashboard.views import page_context
from scheduler_app import selectors
from scheduler_app.errors import DomainError

TASK_BACKFILL = ApiRule(TaskBackfillView, "POST")
DAG_BACKFILL = ApiRule(DagBackfillView, "POST")
FIELDS = ("start", "end", "max_parallel", "reprocess")
# The policy's choices as the dialog offers them: the value, its name, what it does.
REPROCESS_CHOICES = (
    ("none", "None", "fires that already have a run are left alone"),
    ("failed", "Failed", "run again the fires whose run failed, timed out or was cancelled"),
    ("all", "All", "run every fire again, succeeded ones too"),
)
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"


@dataclass
class BackfillForm:
    zone: str
    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    plan: BackfillPlan | None = None

    @property
    def general_errors(self) -> list[str]:
        return [message for name, message in self.errors.items() if name not in FIELDS]

    def plan_rows(self) -> list[dict[str, Any]]:
        zone = ZoneInfo(self.zone)
        rows = []
        for at in self.plan.fires if self.plan else []:
            # Formatted here: the template's date filter would show the active zone (UTC).
            rows.append(
                {
                    "iso": at.isoformat(),
                    "local": at.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),
                    "utc": at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"),
                    "recorded": at in self.plan.already_recorded,
                    **_outcome_words((self.plan.plans or {}).get(at)),
                }
            )
        return rows

    def plan_counts(self) -> list[dict[str, Any]]:
        """The outcomes the whole range would have, those with any fire, in words."""
        counts = (self.plan.counts or {}) if self.plan else {}
        return [
            {"outcome": outcome, "count": counts[outcome], "words": label}
            for outcome, label in FireOutcome.choices
            if counts.get(outcome)
        ]

    @property
    def reprocess_choices(self) -> list[dict[str, Any]]:
        chosen = self.values.get("reprocess") or "none"
        return [
            {"value": value, "name": name, "help": help_text, "checked": value == chosen}
            for value, name, help_text in REPROCESS_CHOICES
        ]


def _outcome_words(plan: FirePlan | None) -> dict[str, str]:
    if plan is None:
        return {"outcome": FireOutcome.NEW, "outcome_words": FireOutcome.NEW.label}
    words = FireOutcome(plan.outcome).label
    if plan.outcome == FireOutcome.RERUN and plan.was:
        words = f"{words} (was {plan.was.replace('_', ' ')})"
    return {"outcome": plan.outcome, "outcome_words": words}


def backfill_form(target, values: dict[str, str] | None = None) -> BackfillForm:
    """The form for `target` (a task or a DAG): the last day, to the hour, by default."""
    zone = ZoneInfo(target.timezone)
    end = timezone.now().astimezone(zone).replace(minute=0, second=0, microsecond=0)
    defaults = {
        "start": (end - timedelta(days=1)).strftime(LOCAL_FORMAT),
        "end": end.strftime(LOCAL_FORMAT),
        "max_parallel": "1",
        "reprocess": "none",
    }
    return BackfillForm(zone=target.timezone, values={**defaults, **(values or {})})


def _moment(raw: str, *, zone: str, name: str, form: BackfillForm) -> datetime | None:
    """A local date-time of the target's zone ("2026-11-01T00:00"), or one with an offset."""
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        form.errors[name] = "a date and time, e.g. 2026-11-01T00:00"
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(zone))


def _bound(target, data) -> tuple[BackfillForm, dict[str, Any] | None]:
    form = backfill_form(target, {name: str(data.get(name, "")) for name in FIELDS if name in data})
    start = _moment(form.values["start"], zone=form.zone, name="start", form=form)
    end = _moment(form.values["end"], zone=form.zone, name="end", form=form)
    try:
        max_parallel = int(form.values["max_parallel"])
    except ValueError:
        form.errors["max_parallel"] = f"a whole number from 1 to {MAX_PARALLEL}"
    if form.errors:
        return form, None
    return form, {
        "start": start,
        "end": end,
        "max_parallel": max_parallel,
        "reprocess": form.values["reprocess"],
    }


def _render(request, target, kind: str, form: BackfillForm, status: int) -> HttpResponse:
    context = {
        "target": target,
        "kind": kind,
        "form": form,
        "action": reverse(f"dashboard:{kind}-backfill-new", args=[target.id]),
        "back": reverse(f"dashboard:{kind}", args=[target.id]),
    }
    if request.headers.get("X-Requested-With") == "fetch":  # the dialog's dry run
        return render(
            request,
            "dashboard/_backfill_form.html",
            {**context, "in_dialog": True, "tenant": page_context(request)["tenant"]},
            status=status,
        )
    context.update(page_context(request))
    return render(request, "dashboard/backfill_new.html", context, status=status)


def _backfill_page(request: HttpRequest, target, kind: str) -> HttpResponse:
    if request.method != "POST":
        return _render(request, target, kind, backfill_form(target), 200)
    form, checked = _bound(target, request.POST)
    if checked is None:
        return _render(request, target, kind, form, 400)
    try:
        if request.POST.get("intent") != "start":
            form.plan = backfills.backfill_plan(**{kind: target}, **checked)
            return _render(request, target, kind, form, 200)
        backfill = backfills.backfill_create(tenant=target.tenant, **{kind: target}, **checked)
    except DomainError as error:
        form.errors[error.field if error.field in FIELDS else "range"] = error.message
        return _render(request, target, kind, form, 400)
    say_with_links(
        request,
        "Backfill of {target} started: {fires} fire times, {parallel} at a time, "
        "reprocess {reprocess}",
        target=(target.name, reverse(f"dashboard:{kind}", args=[target.id])),
        fires=(str(backfill.total), None),
        parallel=(str(backfill.max_parallel), None),
        reprocess=(backfill.reprocess, None),
    )
    return redirect("dashboard:backfills")


@login_required
@follows_api(GET=TASK_BACKFILL, HEAD=TASK_BACKFILL, POST=TASK_BACKFILL)
def task_backfill_new(request: HttpRequest, task_id: str) -> HttpResponse:
    task = tenant_object(request, selectors.task_get, task_id=task_id)
    if is_dag_node_task(task):  # its DAG's runs start it: backfill the DAG
        return redirect("dashboard:task", task_id=task.id)
    return _backfill_page(request, task, "task")


@login_required
@follows_api(GET=DAG_BACKFILL, HEAD=DAG_BACKFILL, POST=DAG_BACKFILL)
def dag_backfill_new(request: HttpRequest, dag_id: str) -> HttpResponse:
    dag = tenant_object(request, dag_selectors.dag_get, dag_id=dag_id)
    return _backfill_page(request, dag, "dag")
