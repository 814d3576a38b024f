"""The design document's runbook for "Task failing repeatedly", run by the platform itself:
check downstream health -> if healthy, retry manually -> if unhealthy, pause the task and
alert its owner.

It starts when a task's (or DAG's) failure streak reaches `policy.pause_after_failures`
(`runs.failure_streaks`, `dags.engine.failure_streaks`: once, at the crossing) and:

1. with a `policy.health_check`, GETs it (`alerting.services.health_checks`, the http
   handler's SSRF guard); without one the service's health is unknown, so it does not retry;
2. healthy: one retry, a new run with trigger `runbook` (a task's: one attempt; a DAG's: a
   new DAG run). If that run fails too, the streak logic hands it back here and, seeing its
   trigger, the runbook pauses instead of retrying again;
3. unhealthy, unknown, or the runbook's retry failed: pauses it (`paused_by` "runbook", a
   note saying why) and tells its `owner` and its `notifications.on_failure` targets, with a
   link to it in the dashboard and to the runbook page of the manual.

Each step is written to the audit log with actor "runbook". Delivery is the caller's (the
Celery task enqueues the returned messages): services never import the Celery tasks."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from alerting import runbooks
from alerting.services.delivery import Target
from alerting.services.health_checks import health_check_probe
from alerting.services.owners import owner_targets
from alerting.services.runbook_turns import runbook_turn
from alerting.services.targets import targets_for
from dags.models import Dag, DagRun
from dags.services.definitions import dag_set_paused
from dags.services.runs import dag_trigger
from scheduler_app.choices import Trigger
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.services.audit import audit_record
from scheduler_app.services.task_definitions import task_pause, task_trigger

logger = logging.getLogger(__name__)

RUNBOOK_ACTOR = "runbook"


def runbook_url() -> str:
    """The manual's section for this runbook (docs/operations/runbooks.md)."""
    return runbooks.runbook_url("task_failing")


@dataclass
class RunbookOutcome:
    """What the runbook did: `action` "retried", "paused" or "skipped" (the definition was
    gone, paused already, no longer has the policy, or this crossing was handled before);
    `note` why; `sends` the notices for the caller to deliver."""

    action: str
    note: str = ""
    retry_id: str | None = None
    sends: list[tuple[Target, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class _Subject:
    """A task or a DAG, as the runbook's steps need it."""

    kind: str  # "task" | "dag"
    id: uuid.UUID
    name: str
    tenant: Tenant
    health_check: dict | None
    owner: str
    on_failure: list[str]
    dashboard_path: str


def _why(failures: int, reason: str) -> str:
    return f"paused by the runbook after {failures} consecutive failures; {reason}"


def _decide(
    subject: _Subject, *, failures: int, retry_failed: bool
) -> tuple[bool, str, dict[str, Any]]:
    """(retry?, the note or the reason of the retry, what the audit entry records)."""
    if retry_failed:
        return False, _why(failures, "the runbook's retry failed"), {"retry_failed": True}
    check = subject.health_check
    if not check:
        reason = "no health check is configured (policy.health_check), so it was not retried"
        return False, _why(failures, reason), {"health": "unknown"}
    verdict = health_check_probe(
        check=check, allowed_hosts=list(subject.tenant.webhook_allowed_hosts or [])
    )
    described = verdict.describe(url=check["url"], expect_status=check["expect_status"])
    detail = {"health": "healthy" if verdict.healthy else "unhealthy", "check": described}
    if verdict.healthy:
        return True, f"{described}: retried once", detail
    return False, _why(failures, described), detail


def _notices(subject: _Subject, *, note: str, failures: int) -> list[tuple[Target, dict]]:
    url = f"{settings.ALERTS['BASE_URL']}{subject.dashboard_path}"
    message = {
        "event": "runbook_paused",
        "title": f"{'DAG' if subject.kind == 'dag' else 'Task'} {subject.name} "
        "was paused by the runbook",
        "text": f"{note}.\nRunbook: {runbook_url()}",
        "tenant": str(subject.tenant.id),
        f"{subject.kind}_id": str(subject.id),
        subject.kind: subject.name,
        "consecutive_failures": failures,
        "paused_by": RUNBOOK_ACTOR,
        "pause_note": note,
        "url": url,
        "runbook_url": runbook_url(),
        # PagerDuty's dedup key for a DAG's (a task's is its task id).
        "rule": RUNBOOK_ACTOR,
        "key": f"{subject.kind}:{subject.id}",
    }
    receivers, problems = owner_targets(tenant_id=subject.tenant.id, owner=subject.owner)
    if subject.on_failure:
        more, more_problems = targets_for(tenant_id=subject.tenant.id, texts=subject.on_failure)
        receivers += more
        problems += more_problems
    for problem in problems:
        logger.warning("runbook of %s %s: not told: %s", subject.kind, subject.id, problem)
    return [(target, message) for target in dict.fromkeys(receivers)]


def _audit(subject: _Subject, *, action: str, detail: dict[str, Any]) -> None:
    audit_record(
        tenant=subject.tenant,
        actor=RUNBOOK_ACTOR,
        action=f"runbook.{action}",
        object_type=subject.kind,
        object_id=str(subject.id),
        detail=detail,
    )


def _already_retried(*, task: TaskDefinition, since: datetime | None) -> bool:
    """A redelivered runbook message for a crossing already handled (at least once from the
    broker): the runbook's retry of it exists."""
    runs = TaskExecution.platform.filter(task=task, trigger=Trigger.RUNBOOK)
    return since is not None and runs.filter(created_at__gte=since).exists()


TURN_TAKEN = "another delivery of this crossing is running the runbook"


def task_runbook_run(*, task_id: str, execution_id: str, failures: int) -> RunbookOutcome:
    with runbook_turn("task", task_id) as mine:
        if not mine:
            return RunbookOutcome("skipped", TURN_TAKEN)
        return _task_runbook(task_id=task_id, execution_id=execution_id, failures=failures)


def _task_runbook(*, task_id: str, execution_id: str, failures: int) -> RunbookOutcome:
    task = TaskDefinition.platform.select_related("tenant").filter(id=task_id).first()
    execution = TaskExecution.platform.filter(id=execution_id, task_id=task_id).first()
    if task is None or execution is None or task.deleted_at is not None:
        return RunbookOutcome("skipped", "the task or its run is gone")
    if task.paused or task.pause_after_failures is None:
        return RunbookOutcome("skipped", "the task is paused, or has no pause_after_failures")
    retry_failed = execution.trigger == Trigger.RUNBOOK
    if not retry_failed and _already_retried(task=task, since=execution.completed_at):
        return RunbookOutcome("skipped", "this crossing was handled already")
    subject = _Subject(
        kind="task",
        id=task.id,
        name=task.name,
        tenant=task.tenant,
        health_check=task.health_check,
        owner=task.owner,
        on_failure=list((task.notifications or {}).get("on_failure") or []),
        dashboard_path=f"/dashboard/tasks/{task.id}",
    )
    retry, note, detail = _decide(subject, failures=failures, retry_failed=retry_failed)
    detail = {**detail, "consecutive_failures": failures, "execution_id": execution_id}
    if retry:
        run = task_trigger(task=task, trigger=Trigger.RUNBOOK, max_attempts=1)
        _audit(subject, action="retry", detail={**detail, "retry_id": str(run.id)})
        return RunbookOutcome("retried", note, retry_id=str(run.id))
    task_pause(task=task, note=note, paused_by=RUNBOOK_ACTOR)
    _audit(subject, action="pause", detail={**detail, "note": note})
    return RunbookOutcome("paused", note, sends=_notices(subject, note=note, failures=failures))


def dag_runbook_run(
    *, dag_id: str, run_id: str, failures: int, retry_failed: bool
) -> RunbookOutcome:
    with runbook_turn("dag", dag_id) as mine:
        if not mine:
            return RunbookOutcome("skipped", TURN_TAKEN)
        return _dag_runbook(
            dag_id=dag_id, run_id=run_id, failures=failures, retry_failed=retry_failed
        )


def _dag_runbook(*, dag_id: str, run_id: str, failures: int, retry_failed: bool) -> RunbookOutcome:
    dag = Dag.platform.select_related("tenant").filter(id=dag_id).first()
    run = DagRun.platform.filter(id=run_id, dag_id=dag_id).first()
    if dag is None or run is None or dag.deleted_at is not None:
        return RunbookOutcome("skipped", "the DAG or its run is gone")
    if dag.paused or dag.pause_after_failures is None:
        return RunbookOutcome("skipped", "the DAG is paused, or has no pause_after_failures")
    if (
        not retry_failed
        and DagRun.platform.filter(
            dag=dag, trigger=Trigger.RUNBOOK, created_at__gte=run.completed_at or run.created_at
        ).exists()
    ):
        return RunbookOutcome("skipped", "this crossing was handled already")
    subject = _Subject(
        kind="dag",
        id=dag.id,
        name=dag.name,
        tenant=dag.tenant,
        health_check=dag.health_check,
        owner=dag.owner,
        on_failure=[],
        dashboard_path=f"/dashboard/dags/{dag.id}",
    )
    retry, note, detail = _decide(subject, failures=failures, retry_failed=retry_failed)
    detail = {**detail, "consecutive_failures": failures, "dag_run_id": run_id}
    if retry:
        retried = dag_trigger(dag=dag, trigger=Trigger.RUNBOOK)
        retry_id = str(retried.id) if retried is not None else None
        _audit(subject, action="retry", detail={**detail, "retry_id": retry_id})
        return RunbookOutcome("retried", note, retry_id=retry_id)
    dag_set_paused(dag=dag, paused=True, note=note, paused_by=RUNBOOK_ACTOR)
    _audit(subject, action="pause", detail={**detail, "note": note})
    return RunbookOutcome("paused", note, sends=_notices(subject, note=note, failures=failures))
