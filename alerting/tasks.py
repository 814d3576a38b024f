"""Celery tasks for notifications: thin, take ids, call the alerting modules.

Delivery is asynchronous by design: a finishing run only enqueues (after its commit) and a
slow or dead receiver never holds a worker's finish transaction or the scheduler's tick.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from celery import current_app as app
from celery import shared_task
from django.conf import settings
from django.db import transaction

from alerting.models import AlertIncident, ChannelKind
from alerting.selectors import delivery_allowed_hosts
from alerting.services.channels import channel_secrets
from alerting.services.incidents import incident_open, incident_resolve
from alerting.services.mail_budget import mail_recipients_admit
from alerting.services.notices import (
    incident_message,
    recovery_message,
    run_message,
    tenant_alert_channels,
)
from alerting.services.targets import targets_for
from scheduler_app.choices import RETRYABLE_STATUSES, ExecutionStatus
from scheduler_app.models import TaskExecution

if TYPE_CHECKING:
    from alerting.services.delivery import Target
    from dags.approval_models import ApprovalWait
    from dags.engine.failure_streaks import DagStreakCrossed

# Celery imports this module in every process that finalizes the app (the beat included, at
# its first publish); the delivery code (requests, the SSRF guard) is imported when used.

logger = logging.getLogger(__name__)

DELIVER_TASK = "alerting.deliver"
RUN_NOTIFICATIONS_TASK = "alerting.run_notifications"
RECOVERY_NOTICE_TASK = "alerting.recovery_notice"
TASK_RUNBOOK_TASK = "alerting.task_runbook"
DAG_RUNBOOK_TASK = "alerting.dag_runbook"
APPROVAL_ANNOUNCE_TASK = "alerting.approval_announce"
DELIVERY_ATTEMPTS = 3


def _send(name: str, *args: Any) -> None:
    app.send_task(name, args=list(args), queue=settings.ALERTS["QUEUE"])


def enqueue_run_notifications(*, execution_id: str, dead_lettered: bool) -> None:
    _send(RUN_NOTIFICATIONS_TASK, execution_id, dead_lettered)


def enqueue_recovery_notice(*, execution_id: str, failures: int) -> None:
    _send(RECOVERY_NOTICE_TASK, execution_id, failures)


def enqueue_task_runbook(*, task_id: str, execution_id: str, failures: int) -> None:
    _send(TASK_RUNBOOK_TASK, task_id, execution_id, failures)


def enqueue_dag_runbook(*, dag_id: str, run_id: str, failures: int, retry_failed: bool) -> None:
    _send(DAG_RUNBOOK_TASK, dag_id, run_id, failures, retry_failed)


def dag_streak_crossed(crossed: DagStreakCrossed) -> None:
    """The DAG engine's word that a DAG's failed runs reached its pause_after_failures
    (`dags.engine.failure_streaks`, registered in AppConfig.ready): its runbook is enqueued
    once the transaction that ended the run commits."""
    arguments = {
        "dag_id": str(crossed.dag_id),
        "run_id": str(crossed.run_id),
        "failures": crossed.failures,
        "retry_failed": crossed.runbook_retry_failed,
    }

    def send() -> None:
        try:
            enqueue_dag_runbook(**arguments)
        except Exception as error:
            logger.warning("could not enqueue the runbook of DAG %s: %s", crossed.dag_id, error)

    transaction.on_commit(send)


def approval_wait_started(wait: ApprovalWait) -> None:
    """The DAG engine's word that an approval node began to wait (`dags.engine.
    approval_waits`, registered in AppConfig.ready): its announcement is enqueued once the
    transaction commits (a wait rolled back is announced to nobody)."""
    wait_id = wait.id

    def send() -> None:
        try:
            _send(APPROVAL_ANNOUNCE_TASK, wait_id)
        except Exception as error:
            logger.warning("could not enqueue the announcement of approval %s: %s", wait_id, error)

    transaction.on_commit(send)


@shared_task(name=APPROVAL_ANNOUNCE_TASK, ignore_result=True)
def approval_announce(wait_id: int) -> int:
    """Tell the DAG's owner and the approvers that an approval waits (signed links)."""
    from alerting.services.approval_notices import approval_announcement  # noqa: PLC0415  (see task_runbook)
    from dags.approval_models import ApprovalWait  # noqa: PLC0415  (loaded when it runs)

    wait = ApprovalWait.platform.select_related("run", "run__dag").filter(id=wait_id).first()
    if wait is None or wait.status != "waiting":
        return 0
    sends, problems = approval_announcement(wait)
    for problem in problems:
        logger.warning("approval %s: announcement not delivered: %s", wait_id, problem)
    for target, message in sends:
        enqueue_delivery(target, message)
    return len(sends)


def enqueue_delivery(target: Target, message: dict[str, Any]) -> None:
    # The channel id, not its secrets: nothing secret is written to the broker.
    _send(
        DELIVER_TASK,
        target.kind,
        target.target,
        target.channel_id,
        message,
        target.route,
        target.tenant_id,
        target.platform,
    )


def enqueue_incident_changes(changes: list[tuple[AlertIncident, bool]]) -> None:
    for incident, resolved in changes:
        message = incident_message(incident, resolved=resolved)
        for target in tenant_alert_channels(tenant=incident.tenant):
            enqueue_delivery(target, message)


@shared_task(name=RUN_NOTIFICATIONS_TASK, ignore_result=True)
def run_notifications(execution_id: str, dead_lettered: bool) -> int:
    """One incident per failing task: the first failure opens it and is announced, later
    failures stay quiet, the next success resolves it and announces the recovery (to the
    failure targets, and to the PagerDuty targets of the dead-letter queue, whose incident
    the dead letter triggered)."""

    execution = TaskExecution.platform.select_related("task").filter(id=execution_id).first()
    if execution is None:
        return 0
    task = execution.task
    wanted = task.notifications or {}
    key = str(task.id)
    sends: list[tuple[Target, dict]] = []

    def to(event: str, message: dict, *, kinds: tuple[str, ...] = ()) -> None:
        texts = wanted.get(event) or []
        targets, problems = targets_for(
            tenant_id=execution.tenant_id, texts=[texts] if isinstance(texts, str) else texts
        )
        for problem in problems:
            logger.warning("task %s: notification target not delivered: %s", task.id, problem)
        for target in targets:
            if (not kinds or target.kind in kinds) and (target, message) not in sends:
                sends.append((target, message))

    if execution.status == ExecutionStatus.SUCCESS:
        if incident_resolve(rule="task_failing", key=key) is not None:
            resolved = run_message(execution, event="resolved")
            to("on_failure", resolved)
            to("on_dlq", resolved, kinds=(ChannelKind.PAGERDUTY,))
        to("on_success", run_message(execution, event="success"))
    elif execution.status in RETRYABLE_STATUSES and (
        wanted.get("on_failure") or wanted.get("on_dlq")
    ):
        opened = incident_open(
            rule="task_failing",
            key=key,
            tenant=execution.task.tenant,
            summary=f"task {task.name} is failing ({execution.error_class or execution.status})",
        )
        if opened is not None:
            to("on_failure", run_message(execution, event="failure"))
    if dead_lettered:
        to("on_dlq", run_message(execution, event="dead_letter"))
    for target, message in sends:
        enqueue_delivery(target, message)
    return len(sends)


@shared_task(name=RECOVERY_NOTICE_TASK, ignore_result=True)
def recovery_notice(execution_id: str, failures: int) -> int:
    """`notifications.on_recovery`: the first success after `failures` failed runs."""
    execution = TaskExecution.platform.select_related("task").filter(id=execution_id).first()
    if execution is None:
        return 0
    texts = (execution.task.notifications or {}).get("on_recovery") or []
    targets, problems = targets_for(tenant_id=execution.tenant_id, texts=list(texts))
    for problem in problems:
        logger.warning("task %s: recovery notice not delivered: %s", execution.task_id, problem)
    message = recovery_message(execution, failures=failures)
    for target in targets:
        enqueue_delivery(target, message)
    return len(targets)


@shared_task(name=TASK_RUNBOOK_TASK, ignore_result=True)
def task_runbook(task_id: str, execution_id: str, failures: int) -> str:
    """The runbook of a task whose failures reached its pause_after_failures."""
    # Local: the runbook's services (the health check's http code) load when it runs.
    from alerting.services.runbook import task_runbook_run  # noqa: PLC0415

    outcome = task_runbook_run(task_id=task_id, execution_id=execution_id, failures=failures)
    for target, message in outcome.sends:
        enqueue_delivery(target, message)
    logger.info("runbook of task %s: %s (%s)", task_id, outcome.action, outcome.note)
    return outcome.action


@shared_task(name=DAG_RUNBOOK_TASK, ignore_result=True)
def dag_runbook(dag_id: str, run_id: str, failures: int, retry_failed: bool) -> str:
    """The runbook of a DAG whose failed runs reached its pause_after_failures."""
    from alerting.services.runbook import dag_runbook_run  # noqa: PLC0415  (see task_runbook)

    outcome = dag_runbook_run(
        dag_id=dag_id, run_id=run_id, failures=failures, retry_failed=retry_failed
    )
    for target, message in outcome.sends:
        enqueue_delivery(target, message)
    logger.info("runbook of DAG %s: %s (%s)", dag_id, outcome.action, outcome.note)
    return outcome.action


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver_notification(
    kind: str,
    target: str,
    channel_id: str | None,
    message: dict,
    route: str = "",
    tenant_id: str | None = None,
    platform: bool = False,
) -> bool:
    """A few quick tries in place (no broker ETA: the project keeps no delays in Redis).
    `tenant_id` / `platform`: whose notification (a message of neither, from before they
    were sent, reaches no internal host)."""
    # Local: the delivery code (requests, the SSRF guard) loads when a delivery runs, not in
    # every process that finalizes the Celery app (see the note above).
    from alerting.services.delivery import DeliveryResult, Target, deliver  # noqa: PLC0415

    receiver = Target(kind, target, channel_id, route=route, tenant_id=tenant_id, platform=platform)
    if kind == ChannelKind.EMAIL:
        # A tenant's mail within its domains and hourly rate; what is not sent is recorded.
        recipients = mail_recipients_admit(target=receiver, message=message)
        if not recipients:
            return False
        receiver = replace(receiver, target=", ".join(recipients))
    secret, credential = channel_secrets(channel_id=channel_id) if channel_id else ("", "")
    allowed_hosts = delivery_allowed_hosts(receiver)
    result = DeliveryResult(False, "not tried")
    for attempt in range(1, DELIVERY_ATTEMPTS + 1):
        result = deliver(
            receiver,
            message,
            signing_secret=secret,
            credential=credential,
            allowed_hosts=allowed_hosts,
        )
        if result.ok or not result.transient:
            break
        time.sleep(attempt)
    if not result.ok:
        logger.warning("notification to %s %s failed: %s", kind, target, result.detail)
    return result.ok
