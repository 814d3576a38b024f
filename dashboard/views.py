"""Dashboard pages. Each page renders a shell plus a live fragment; the page's script polls
`?fragment=1` and swaps the fragment in, so numbers and charts update without a reload."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from alerting import selectors as alerting_selectors
from alerting.services.sla import sla_misses_list
from dags import selectors as dag_selectors
from dashboard.fire_calendar import fire_calendar
from dashboard.incidents import incident_rows
from dashboard.latency import TREND_BUCKET, TREND_WINDOW, latency_panel
from dashboard.logs import TAIL_LINES, stored_log_tail
from dashboard.naming import is_dag_node_task, label_dag_nodes
from dashboard.progress import progress_attach
from dashboard.sizing import resources_panel
from dashboard.tenancy import (
    dashboard_membership,
    dashboard_memberships,
    raise_if_elsewhere,
    remember_tenant,
    shows_other_tenant,
)
from data_lifecycle.selectors.latency import task_latency
from scheduler_app import selectors
from scheduler_app.capabilities import capability_of_queue
from scheduler_app.choices import ACTIVE_STATUSES, TERMINAL_STATUSES, WAITING_STATUSES, Trigger
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.fleet.capabilities import live_capabilities, task_warnings
from scheduler_app.monitoring import missed, stats, system
from scheduler_app.monitoring.workers import WorkerInfo, worker_list
from scheduler_app.selectors.checkpoints import checkpoint_summaries
from scheduler_app.selectors.log_search_budget import log_search_budget
from scheduler_app.selectors.log_search_windows import newest_first_windows
from scheduler_app.selectors.losses import execution_losses
from scheduler_app.task_schedule import fires_left, schedule_of_task
from schedules import ScheduleError
from schedules.preview import timeline
from tracing.context import trace_id_of

# The overview shows the first tasks and the newest runs; the Tasks and Runs pages have all.
OVERVIEW_TASKS = 20
HISTORY_ROWS = 25
DLQ_ROWS = 200
OVERVIEW_INCIDENTS = 10


def page_context(request: HttpRequest) -> dict[str, Any]:
    """What the page frame (base.html) shows: tenant switch, role, links, poll interval."""
    membership = dashboard_membership(request)
    return {
        "tenant": membership.tenant,
        # The nav's badge: open incidents nobody acknowledged yet. Counted when the frame is
        # rendered (the template calls it), never for a live fragment's poll, once a page.
        "open_incidents": functools.cache(
            functools.partial(alerting_selectors.incidents_open_count, tenant=membership.tenant)
        ),
        "role": membership.role,
        "memberships": dashboard_memberships(request),
        "poll_seconds": settings.MONITORING["DASHBOARD_POLL_SECONDS"],
        "flower_url": settings.MONITORING["FLOWER_URL"],
        "now": timezone.now(),
    }


def _page(request: HttpRequest, name: str, context: dict[str, Any]) -> HttpResponse:
    context.update(page_context(request))
    template = (
        f"dashboard/{name}_live.html" if request.GET.get("fragment") else f"dashboard/{name}.html"
    )
    return remember_tenant(request, render(request, template, context))


def _found(getter, *, request: HttpRequest | None = None, kind: str = "", **kwargs):
    """The object, or a 404; with `request`, an object of another of the user's tenants
    raises InAnotherTenant (the page then offers the switch, see tenancy)."""
    try:
        return getter(**kwargs)
    except NotFound as error:
        if request is not None:
            raise_if_elsewhere(request, kind=kind, object_id=kwargs[f"{kind}_id"])
        raise Http404(str(error)) from error


def _queues() -> list[system.QueueState] | None:
    try:
        return system.queue_states()
    except Exception:  # broker unreachable: the page says so instead of failing
        return None


def _workers() -> list[WorkerInfo] | None:
    try:
        return worker_list()
    except Exception:  # registry (Redis) unreachable: the page says so instead of failing
        return None


def _workers_alive() -> int | None:
    workers = _workers()
    return None if workers is None else sum(1 for w in workers if w.alive)


@login_required
@require_safe
def overview(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    summary = stats.overview(tenant=tenant)
    tasks = selectors.task_list(tenant=tenant)
    return _page(
        request,
        "overview",
        {
            "summary": summary,
            "statuses": sorted(set(summary["runs_last_day"]) | set(summary["runs_last_hour"])),
            "queues": _queues(),
            "workers_alive": _workers_alive(),
            "recent": label_dag_nodes(
                tenant=tenant, executions=stats.recent_executions(tenant=tenant, limit=15)
            ),
            "tasks": tasks[:OVERVIEW_TASKS],
            "task_count": tasks.count(),
            "incidents": incident_rows(
                tenant=tenant,
                incidents=alerting_selectors.incidents_current(tenant=tenant)[:OVERVIEW_INCIDENTS],
            ),
            "sla_misses": [
                {
                    "incident": incident,
                    "execution_id": incident.key.split(":", 1)[1]
                    if incident.key.startswith("execution:")
                    else None,
                }
                for incident in sla_misses_list(
                    tenant=tenant, since=timezone.now() - timedelta(hours=24)
                )[:20]
            ],
            "charts": {
                "hour": stats.runs_over_time(tenant=tenant, hours=1),
                "day": stats.runs_over_time(tenant=tenant, hours=24),
            },
        },
    )


def _task_history(request: HttpRequest, *, tenant, task) -> tuple[Any, int | None, str, str]:
    """The task's newest HISTORY_ROWS runs, or those whose stored log has the words searched
    for: (runs, how many there are (None: more than shown, not counted), the words, the
    search's error). A search asks recent windows before the whole history, as the API's
    newest-first pages do (`scheduler_app.selectors.log_search_windows`)."""
    words = request.GET.get("log_contains", "").strip()
    runs = selectors.execution_list_for_task(tenant=tenant, task=task)
    if not words:
        return runs[:HISTORY_ROWS], runs.count(), "", ""

    def search(window):
        return selectors.execution_list(
            tenant=tenant, filters={"task": str(task.id), "log_contains": words}, log_window=window
        ).order_by("-scheduled_at", "-attempt")

    try:
        # The API's budget: one place among the tenant's searches at once, one time budget.
        with log_search_budget(tenant_id=tenant.id):
            found = search(None)
            for start in newest_first_windows(
                tenant=tenant,
                words=words,
                anchor=timezone.now(),
                wanted=2 * (HISTORY_ROWS + 1),
                runs=runs,
            ):
                # The newest rows, and one more that says there are more than shown.
                rows = list(
                    (found if start is None else search(("scheduled_at", start)))[
                        : HISTORY_ROWS + 1
                    ]
                )
                if start is None or len(rows) > HISTORY_ROWS:
                    more = len(rows) > HISTORY_ROWS
                    return rows[:HISTORY_ROWS], None if more else len(rows), words, ""
    except DomainError as error:  # bad words, or the search over its budget
        return [], 0, words, error.message
    raise AssertionError("the windows end with the whole history")  # pragma: no cover


@login_required
@require_safe
@shows_other_tenant
def task_detail(request: HttpRequest, task_id: str) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    task = _found(selectors.task_get, request=request, kind="task", tenant=tenant, task_id=task_id)
    count = fires_left(task, 5)
    try:
        # With calendar exclusions, the skipped fires among the next ones show too (and why).
        upcoming = timeline(schedule_of_task(task), count=count, now=timezone.now(), max_skipped=10)
    except ScheduleError:
        upcoming = []
    if not task.is_schedulable:
        upcoming = []
    history, history_count, log_contains, log_search_error = _task_history(
        request, tenant=tenant, task=task
    )
    # Formatted here: the template's date filter would convert the local time back to UTC.
    upcoming = [
        {
            "utc": entry.fire.utc.strftime("%Y-%m-%d %H:%M:%S"),
            "local": entry.fire.local.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "skipped": entry.skipped,
            "reason": entry.reason,
        }
        for entry in upcoming
    ]
    latency = latency_panel(
        task_latency(
            tenant=tenant,
            task_id=task.id,
            window=TREND_WINDOW,
            bucket=TREND_BUCKET,
            now=timezone.now(),
        )
    )
    dag_owner = (
        dag_selectors.dag_of_node_task(tenant=tenant, task_id=task.id)
        if is_dag_node_task(task)
        else None
    )
    return _page(
        request,
        "task",
        {
            "task": task,
            "dag_node_task": is_dag_node_task(task),
            "calendar": fire_calendar(tenant=tenant, task=task, now=timezone.now()),
            "dag_owner": dag_owner,
            "upcoming": upcoming,
            "history": progress_attach(label_dag_nodes(tenant=tenant, executions=history)),
            "history_count": history_count,
            "log_contains": log_contains,
            "log_search_error": log_search_error,
            "failures": stats.failure_breakdown(tenant=tenant, task=task),
            "misses": missed.missed_fires(
                tenant=tenant,
                task=task,
                window=timedelta(hours=24),
                grace_seconds=settings.MONITORING["MISSED_GRACE_SECONDS"],
            ),
            "charts": {
                "trend": stats.task_trend(tenant=tenant, task=task),
                "latency": latency["points"],
            },
            "latency": latency,
            "resources": resources_panel(tenant=tenant, task=task),
            "warnings": _task_warnings(task),
            "incidents": incident_rows(
                tenant=tenant,
                incidents=alerting_selectors.incidents_of_task(tenant=tenant, task=task),
            ),
        },
    )


def _task_warnings(task) -> list[str]:
    try:
        return task_warnings(task.handler_config)
    except Exception:  # the fleet registry (Redis) unreachable: the page still shows
        return []


def _waiting_for(execution) -> dict[str, Any] | None:
    """Why a waiting run has not started: it needs a capability; does a live worker offer it?"""
    capability = capability_of_queue(execution.queue)
    if capability is None or execution.status not in WAITING_STATUSES:
        return None
    try:
        offered = capability in live_capabilities()
    except Exception:
        offered = None
    return {
        "capability": capability,
        "offered": offered,
        "wait_seconds": settings.SCHEDULER["CAPABILITY_WAIT_SECONDS"],
    }


@login_required
@require_safe
@shows_other_tenant
def execution_detail(request: HttpRequest, execution_id: str) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    execution = _found(
        selectors.execution_get,
        request=request,
        kind="execution",
        tenant=tenant,
        execution_id=execution_id,
    )
    progress_attach([execution])
    # The log sits outside the polled fragment: the page's script follows the live tail.
    whole_page = not request.GET.get("fragment")
    dag_node = (
        dag_selectors.dag_node_of_execution(tenant=tenant, execution=execution)
        if execution.trigger in (Trigger.DAG, Trigger.RETRY)
        else None
    )
    execution.dag_node = dag_node
    # Whether its run has a checkpoint (its size; the content is the API's, for the tenant).
    execution.checkpoint = checkpoint_summaries(tenant=tenant, executions=[execution]).get(
        execution.id
    )
    trace_id = trace_id_of(execution.traceparent)
    return _page(
        request,
        "execution",
        {
            "execution": execution,
            # The run's trace (docs/operations/tracing.md), linked where a trace UI is set.
            "trace_id": trace_id,
            "trace_url": trace_ui_url(trace_id),
            "timeline": stats.execution_timeline(
                execution, losses=execution_losses(tenant=tenant, execution=execution)
            ),
            "attempts": stats.execution_attempts(tenant=tenant, execution=execution),
            "result_json": json.dumps(execution.result, indent=2, default=str)
            if execution.result is not None
            else "",
            "log_tail": stored_log_tail(tenant=tenant, execution=execution) if whole_page else "",
            "log_tail_lines": TAIL_LINES,
            "log_follow": execution.status in ACTIVE_STATUSES,
            "cancellable": execution.status in ACTIVE_STATUSES,
            # An ended run of a task (a DAG node's is cleared in its DAG run instead).
            "rerunnable": execution.status in TERMINAL_STATUSES and dag_node is None,
            "rerun_parameters": json.dumps(execution.parameters or {}, indent=2),
            "waiting_for": _waiting_for(execution),
            "dag_node": dag_node,
        },
    )


@login_required
@require_safe
def workers(request: HttpRequest) -> HttpResponse:
    """The fleet (every worker's load, the queues, the schedulers) is platform staff's: its
    numbers span every tenant. A tenant member sees their own tenant's runs per worker."""
    if not request.user.is_staff:
        tenant = dashboard_membership(request).tenant
        return _page(
            request, "workers_tenant", {"by_worker": selectors.running_by_worker(tenant=tenant)}
        )
    try:
        nodes = system.scheduler_nodes()
    except Exception:
        nodes = []
    context = {"workers": _workers(), "queues": _queues(), "nodes": nodes}
    try:
        return _page(request, "workers", context)
    except Http404:  # staff need no tenant membership to see the fleet
        context.update(
            tenant=None,
            memberships=[],
            poll_seconds=settings.MONITORING["DASHBOARD_POLL_SECONDS"],
            flower_url=settings.MONITORING["FLOWER_URL"],
            now=timezone.now(),
        )
        template = "workers_live" if request.GET.get("fragment") else "workers"
        return render(request, f"dashboard/{template}.html", context)


@login_required
@require_safe
def missed_schedules(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    try:
        hours = max(1, min(int(request.GET.get("hours", "24")), 24 * 7))
    except ValueError:
        hours = 24
    return _page(
        request,
        "missed",
        {
            "hours": hours,
            "grace": settings.MONITORING["MISSED_GRACE_SECONDS"],
            "misses": missed.missed_fires(
                tenant=tenant,
                window=timedelta(hours=hours),
                grace_seconds=settings.MONITORING["MISSED_GRACE_SECONDS"],
            ),
        },
    )


def trace_ui_url(trace_id: str | None) -> str:
    """Where the trace UI shows a trace (OTEL_TRACE_UI_URL with its {trace_id}), or ""."""
    template = settings.TRACING["UI_URL"]
    if not trace_id or "{trace_id}" not in template:
        return ""
    return template.replace("{trace_id}", trace_id)
