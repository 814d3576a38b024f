"""The start of a sleep or sensor node: a `DagTimer` row, never a timer in a process.

Runs in the transaction that made the node ready, with the run locked (readiness). The node
goes to `sleeping` or `sensing` and holds no execution and no worker slot; the beat leader's
housekeeping ends it when its row is due (`dags.services.timers`). A restart of every process
therefore changes nothing: the row, its `due_at` and its deadline are all there is.

A sleep's `until` template is rendered here, from the run's parameters (the DAG's, under the
run's trigger parameters, as a node's parameters are merged), under the expression budget.
A time that does not parse, lacks a UTC offset or lies past the tenant's retention window
fails the node with that message; a time already past wakes it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from budgets.limits import BudgetExceeded
from budgets.templates import template_render
from dags.choices import NodeStatus, TimerKind, TimerStatus
from dags.graph import Graph
from dags.models import DagNodeState, DagRun, DagTimer
from dags.spec_errors import DagSpecError
from dags.spec_timers import until_parse
from scheduler_app.limits import expression_budget
from scheduler_app.models import Tenant


def timer_begin(
    *, run: DagRun, graph: Graph, node_id: str, node: Mapping[str, Any]
) -> tuple[str, str] | None:
    """Record the node's timer. None while it waits; (final status, error) when it ends at
    once (a sleep whose time has passed: success; an `until` that cannot be used: failed)."""
    now = timezone.now()
    if node["type"] == "sleep":
        try:
            due_at = _wake_at(run=run, graph=graph, sleep=node, now=now)
        except DagSpecError as error:
            _row_save(
                run=run,
                node_id=node_id,
                kind=TimerKind.SLEEP,
                now=now,
                due_at=now,
                status=TimerStatus.FAILED,
                error=error.message,
            )
            return NodeStatus.FAILED, error.message
        if due_at <= now:
            _row_save(
                run=run,
                node_id=node_id,
                kind=TimerKind.SLEEP,
                now=now,
                due_at=due_at,
                status=TimerStatus.FIRED,
            )
            return NodeStatus.SUCCESS, ""
        _row_save(run=run, node_id=node_id, kind=TimerKind.SLEEP, now=now, due_at=due_at)
        status = NodeStatus.SLEEPING
    else:
        _row_save(
            run=run,
            node_id=node_id,
            kind=TimerKind.SENSOR,
            now=now,
            due_at=now,  # the first poke at the next round
            deadline=now + timedelta(seconds=node["timeout"]),
            interval_seconds=node["interval"],
        )
        status = NodeStatus.SENSING
    DagNodeState.objects.filter(run=run, node_id=node_id, status=NodeStatus.WAITING).update(
        status=status, started_at=now, updated_at=now
    )
    return None


def _row_save(
    *,
    run: DagRun,
    node_id: str,
    kind: str,
    now: datetime,
    due_at: datetime,
    status: str = TimerStatus.WAITING,
    deadline: datetime | None = None,
    interval_seconds: float = 0.0,
    error: str = "",
) -> None:
    ended = status != TimerStatus.WAITING
    # update_or_create: a re-run of the run's failed nodes begins the node again.
    DagTimer.platform.update_or_create(
        run=run,
        node_id=node_id,
        defaults={
            "tenant_id": run.tenant_id,
            "kind": kind,
            "status": status,
            "started_at": now,
            "due_at": due_at,
            "deadline": deadline,
            "interval_seconds": interval_seconds,
            "attempts": 0,
            "last_poked_at": None,
            "last_result": None,
            "last_error": error,
            "resolved_at": now if ended else None,
            "lease_until": None,
        },
    )


def _wake_at(*, run: DagRun, graph: Graph, sleep: Mapping[str, Any], now: datetime) -> datetime:
    if "duration" in sleep:
        return now + timedelta(seconds=sleep["duration"])
    parameters = {**graph.parameters, **(run.parameters or {})}

    def fill(name: str) -> str:
        value: Any = parameters
        for part in name.split(".")[1:]:
            if not isinstance(value, Mapping) or part not in value:
                raise DagSpecError(
                    f"until: the run has no parameter {name.removeprefix('parameters.')}",
                    field="until",
                )
            value = value[part]
        return value if isinstance(value, str) else str(value)

    try:
        text = template_render(sleep["until"], fill=fill, budget=expression_budget())
    except BudgetExceeded as error:
        raise DagSpecError(f"until: {error.message}", field="until") from error
    moment = until_parse(text, field="until")
    days = Tenant.objects.filter(id=run.tenant_id).values_list("retention_days", flat=True)[0]
    if moment - now > timedelta(days=days):
        raise DagSpecError(
            f"until: {text} is more than this tenant's retention window ({days} days) ahead",
            field="until",
        )
    return moment
