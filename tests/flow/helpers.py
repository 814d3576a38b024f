"""Builders shared by the flow-control tests: tasks under limits and their claimed runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.claims import Claim, executions_claim
from scheduler_app.services.flow_admission import FlowVerdict, flow_admit
from tests.factories import make_queued_runs, make_task

QUEUE = "flow-tests"  # no live worker reads it


def limited_task(tenant, name: str = "sync", **flow):
    return make_task(tenant, name=name, schedule={"type": "manual"}, **flow)


def queued(task, count: int, *, due: datetime | None = None, **parameters) -> list[TaskExecution]:
    return make_queued_runs(
        task, count, queue=QUEUE, due=due or timezone.now(), parameters=parameters or None
    )


def claim(runs: Sequence[TaskExecution], worker: str = "w1") -> list[Claim]:
    return executions_claim(
        execution_ids=[run.id for run in runs], worker_id=worker, lease_seconds=60
    )


def claim_and_admit(
    runs: Sequence[TaskExecution], *, now: datetime | None = None, worker: str = "w1"
) -> FlowVerdict:
    return flow_admit(claims=claim(runs, worker), now=now)


def ids(claims) -> set:
    return {item.execution.id for item in claims}


def finish(runs, status: str = "success") -> None:
    TaskExecution.platform.filter(id__in=[run.id for run in runs]).update(
        status=status, completed_at=timezone.now()
    )


def make_waiting_due(runs) -> None:
    """The recheck time of waiting runs has come (instead of waiting for it)."""
    TaskExecution.platform.filter(id__in=[run.id for run in runs]).update(
        flow_wake_at=timezone.now(), status="queued"
    )
