"""DAG pages of the dashboard: the tenant's DAGs, one DAG with its runs, one run drawn as a
graph and a Gantt chart. Reads go through `dags.selectors`; drawing maths is in
`dag_layout`. Another tenant's DAG or run id is a 404, like every dashboard page."""

from __future__ import annotations

import json
from collections import Counter

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from alerting import selectors as alerting_selectors
from dags import selectors as dag_selectors
from dags.attempt_selectors import dag_run_node_attempts
from dags.choices import ACTIVE_RUN_STATUSES, RunStatus
from dags.event_selectors import event_waits_of_run, events_by_id
from dags.models import DagRun
from dags.outcome_selectors import dag_run_outcomes
from dags.services.node_actions import IN_FLIGHT
from dags.services.runs import RERUNNABLE
from dags.timer_selectors import timer_time_left, timers_of_run
from dags.versions import graph_of_version
from dashboard.dags.approval_pages import approval_deadlines, run_approvals
from dashboard.dags.dag_layout import (
    TONES,
    deadline_line,
    gantt,
    graph_layout,
    timer_line,
    tone_of,
)
from dashboard.durations import format_duration
from dashboard.incidents import incident_rows
from dashboard.latency import TREND_BUCKET, TREND_WINDOW, latency_panel
from dashboard.roles import route_allows
from dashboard.tenancy import dashboard_membership, shows_other_tenant
from dashboard.views import _found, _page
from data_lifecycle.selectors.latency import dag_latency

RECENT_RUNS_PER_DAG = 8
GRID_RUNS = 20


def _grid(*, tenant, node_ids: list[str], runs: list[DagRun]) -> dict:
    """Runs x nodes, Airflow-style: one column per run (oldest left), one row per node (the
    current version's order, then nodes only older versions had), each cell in the node's
    state colour."""
    columns = list(reversed(runs))
    states = dag_selectors.dag_run_grid_states(tenant=tenant, runs=columns)
    extra = sorted({node for _, node in states} - set(node_ids))
    rows = []
    for node_id in [*node_ids, *extra]:
        cells = []
        for run in columns:
            state = states.get((run.id, node_id))
            status = state.status if state else ""
            cells.append(
                {
                    "run": run,
                    "status": status,
                    "tone": tone_of(status) if status else "none",
                    "execution_id": state.execution_id if state else None,
                }
            )
        rows.append({"node_id": node_id, "cells": cells})
    return {"runs": columns, "rows": rows}


def _run_duration(run: DagRun, now) -> str:
    """How long the run took; a run still going has no duration yet: "running for …"."""
    if run.started_at is None:
        return ""
    if run.completed_at is None:
        return f"running for {format_duration((now - run.started_at).total_seconds())}"
    return format_duration((run.completed_at - run.started_at).total_seconds())


@login_required
@require_safe
def dag_list(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    dags = list(dag_selectors.dag_list(tenant=tenant)[:200])
    recent = dag_selectors.dag_recent_runs(
        tenant=tenant, dag_ids=[dag.id for dag in dags], per_dag=RECENT_RUNS_PER_DAG
    )
    return _page(
        request, "dags", {"rows": [{"dag": dag, "runs": recent.get(dag.id, [])} for dag in dags]}
    )


def _node_summary(node: dict) -> tuple[str, str]:
    """Two short lines a definition's node box shows: what runs, and how it fans out."""
    if "task" in node:
        what = f"task {node['task']}"
    elif "wait_for_event" in node:
        what = f"waits for event {node['wait_for_event'].get('name', '?')}"
    elif node.get("type") == "sleep":
        what = f"sleeps until {node.get('until')}"
        if "duration" in node:
            what = f"sleeps {format_duration(node['duration'])}"
    elif node.get("type") == "sensor":
        what = f"{node['sensor']['kind']} sensor"
    elif node.get("type") == "approval":
        approval = node["approval"]
        who = f"{approval['role']}+" if approval["role"] else ", ".join(approval["users"])
        what = f"approval: {approval['count']} of {who}"
    elif isinstance(node.get("handler"), str):
        what = f"python {node['handler']}"  # the design document's spelling: a handler's name
    else:
        handler = node.get("handler") or {}
        detail = handler.get("callable") or handler.get("url") or ""
        what = f"{handler.get('type', '?')} {detail}".strip()
    mapped = node.get("map_over") or {}
    how = ""
    if "field" in mapped:
        how = f"fans out over {mapped['field']}"
    elif "items" in mapped:
        how = f"fans out over {len(mapped['items'])} items"
    if node.get("trigger_rule") and node["trigger_rule"] != "all_success":
        how = f"{how} · {node['trigger_rule']}".strip(" ·")
    return what, how


@login_required
@require_safe
@shows_other_tenant
def dag_detail(request: HttpRequest, dag_id: str) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    dag = _found(dag_selectors.dag_get, request=request, kind="dag", tenant=tenant, dag_id=dag_id)
    version = dag_selectors.dag_version_get(dag=dag)
    now = timezone.now()
    runs = list(dag_selectors.dag_run_list(tenant=tenant, dag=dag).order_by("-scheduled_at")[:25])
    latency = latency_panel(
        dag_latency(tenant=tenant, dag_id=dag.id, window=TREND_WINDOW, bucket=TREND_BUCKET, now=now)
    )
    node_ids = [node["id"] for node in version.spec["tasks"]] if version else []
    outcomes = dag_run_outcomes(tenant=tenant, runs=runs)
    definition = (
        graph_layout(
            depends_on={node["id"]: node.get("depends_on", []) for node in version.spec["tasks"]},
            states={},
            now=now,
        )
        if version
        else None
    )
    return _page(
        request,
        "dag",
        {
            "layout": definition,
            "definition": True,
            "node_meta": {node["id"]: _node_summary(node) for node in version.spec["tasks"]}
            if version
            else {},
            "dag": dag,
            "node_ids": node_ids,
            "runs": [
                {"run": run, "duration": _run_duration(run, now), "outcome": outcomes.get(run.id)}
                for run in runs
            ],
            "grid": _grid(tenant=tenant, node_ids=node_ids, runs=runs[:GRID_RUNS]),
            "latency": latency,
            "charts": {"latency": latency["points"]},
            "incidents": incident_rows(
                tenant=tenant, incidents=alerting_selectors.incidents_of_dag(tenant=tenant, dag=dag)
            ),
        },
    )


def _event_waits(run: DagRun) -> list[dict]:
    """The run's wait_for_event nodes, with the event that released each (if one did)."""
    waits = event_waits_of_run(run=run)
    events = events_by_id(
        tenant_id=run.tenant_id, event_ids=[w.event_id for w in waits if w.event_id]
    )
    return [
        {
            "wait": wait,
            "match_json": json.dumps(wait.match, sort_keys=True),
            "event": events.get(wait.event_id),
            "payload_json": json.dumps(events[wait.event_id].payload, sort_keys=True)
            if wait.event_id in events
            else "",
        }
        for wait in waits
    ]


def _timers(run: DagRun, *, now) -> list[dict]:
    """The run's sleep and sensor rows, each with the line its graph box shows."""
    rows = []
    for timer in timers_of_run(run=run):
        left = timer_time_left(timer, now=now)
        line = timer_line(kind=timer.kind, due_in=left.due_in, deadline_in=left.deadline_in)
        rows.append({"row": timer, "line": line})
    return rows


@login_required
@require_safe
@shows_other_tenant
def dag_run_detail(request: HttpRequest, dag_id: str, run_id: str) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    dag = _found(dag_selectors.dag_get, request=request, kind="dag", tenant=tenant, dag_id=dag_id)
    run = _found(dag_selectors.dag_run_get, tenant=tenant, dag=dag, run_id=run_id)
    nodes = dag_selectors.dag_run_nodes(run=run)
    # Nodes run more than once in this run (re-run, dead letter retried): every attempt.
    history = dag_run_node_attempts(run=run, nodes=nodes, rerun_only=True)
    graph = graph_of_version(run.version_id)
    now = timezone.now()
    timers = _timers(run, now=now)
    layout = graph_layout(
        depends_on={node_id: node["depends_on"] for node_id, node in graph.nodes.items()},
        states={node.node_id: node for node in nodes},
        now=now,
        time_left={
            **{t["row"].node_id: t["line"] for t in timers},
            **{
                node_id: deadline_line(deadline, now=now)
                for node_id, deadline in approval_deadlines(run=run).items()
            },
        },
    )
    tones = Counter(box.tone for box in layout.nodes)
    return _page(
        request,
        "dag_run",
        {
            "dag": dag,
            "run": run,
            "run_duration": _run_duration(run, now),
            "outcome": dag_run_outcomes(tenant=tenant, runs=[run]).get(run.id),
            "finished": run.status not in ACTIVE_RUN_STATUSES,
            "layout": layout,
            "tone_counts": [(tone, tones.get(tone, 0)) for tone in TONES],
            "gantt": gantt(
                run_started_at=run.started_at,
                run_completed_at=run.completed_at,
                states=nodes,
                execution_starts=dag_selectors.dag_run_execution_starts(run=run, nodes=nodes),
                now=now,
                earlier={
                    node_id: [a for a in attempts if not a.current]
                    for node_id, attempts in history.items()
                },
            ),
            "attempts": [attempt for attempts in history.values() for attempt in attempts],
            "errors": [node for node in nodes if node.error_message],
            "event_waits": _event_waits(run),
            "timers": timers,
            "approvals": run_approvals(
                run=run,
                user=request.user,
                may_press=route_allows(
                    dashboard_membership(request).role, "dag-run-node-action.approve"
                ),
            ),
            "shards": dag_selectors.dag_run_shards(run=run),
            "cancellable": run.status in ACTIVE_RUN_STATUSES,
            "rerunnable": run.status in RERUNNABLE,
            "run_nodes": nodes,  # each with its clear / mark actions once the run has ended
            # While it runs: the nodes that may be marked now (dags.services.node_actions).
            "in_flight_nodes": [
                node for node in nodes if node.status in IN_FLIGHT and node.map_total is None
            ]
            if run.status == RunStatus.RUNNING
            else [],
        },
    )
