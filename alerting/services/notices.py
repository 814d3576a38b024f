"""What to tell whom: messages for run events and alert incidents, and the channels that
receive them. Pure reads and message building; delivery happens in Celery tasks."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from alerting.incident_words import rule_title
from alerting.models import AlertIncident, NotificationChannel
from alerting.runbooks import runbook_url
from alerting.services.delivery import Target
from scheduler_app.models import TaskExecution, Tenant

EVENTS = ("on_failure", "on_success", "on_dlq", "on_recovery")
# The dashboard page an alert's link opens (the dashboard's home for the others).
INCIDENT_PAGES = {
    "dead_worker": "workers",
    "worker_pool_saturated": "workers",
    "missed_schedule": "missed",
}


def tenant_alert_channels(*, tenant: Tenant | None) -> list[Target]:
    """A tenant's alert channels; system-wide incidents go to the operators' settings."""
    if tenant is not None:
        return [
            Target(c.kind, c.target, str(c.id), tenant_id=str(tenant.id))
            for c in NotificationChannel.objects.filter(tenant=tenant, alerts=True)
        ]
    targets = []
    if settings.ALERTS["OPS_WEBHOOK_URL"]:
        targets.append(Target("webhook", settings.ALERTS["OPS_WEBHOOK_URL"], platform=True))
    if settings.ALERTS["OPS_EMAILS"]:
        targets.append(Target("email", ",".join(settings.ALERTS["OPS_EMAILS"]), platform=True))
    return targets


def run_message(execution: TaskExecution, *, event: str) -> dict[str, Any]:
    task = execution.task
    words = {
        "failure": f"Task {task.name} failed",
        "resolved": f"Task {task.name} recovered",
        "recovery": f"Task {task.name} recovered",
        "success": f"Task {task.name} succeeded",
        "dead_letter": f"Task {task.name} was dead-lettered",
    }
    text = f"attempt {execution.attempt}/{execution.max_attempts}, status {execution.status}"
    if execution.error_class:
        text += f", {execution.error_class}: {execution.error_message[:300]}"
    message = {
        "event": event,
        "title": words[event],
        "text": text,
        "tenant": str(execution.tenant_id),
        "task_id": str(task.id),
        "task": task.name,
        "execution_id": str(execution.id),
        "status": execution.status,
        "url": f"{settings.ALERTS['BASE_URL']}/dashboard/executions/{execution.id}",
    }
    if execution.traceparent:
        # Sent as the webhook's `traceparent` header, not in its body (alerting.services.
        # delivery): the receiver's handling joins the run's trace.
        message["traceparent"] = execution.traceparent
    if event in ("failure", "dead_letter"):
        # What to do about a failing task: the `task_failing` incident's runbook.
        message["runbook_url"] = runbook_url("task_failing")
    return message


def recovery_message(execution: TaskExecution, *, failures: int) -> dict[str, Any]:
    """`notifications.on_recovery`: the first success after `failures` failed runs."""
    message = run_message(execution, event="recovery")
    runs = "run" if failures == 1 else "runs"
    message["text"] = f"succeeded after {failures} consecutive failed {runs}"
    message["failures"] = failures
    return message


def _incident_page(incident: AlertIncident) -> str:
    """A tenant's incident opens on its row of the Incidents page; a platform one (no tenant)
    on the page its rule is about, else the dashboard's home."""
    if incident.tenant_id is not None:
        return f"incidents#incident-{incident.id}"
    return INCIDENT_PAGES.get(incident.rule, "")


def incident_message(incident: AlertIncident, *, resolved: bool) -> dict[str, Any]:
    # Announced again (alerts_evaluate, while nobody acknowledged it): says since when.
    reminder = (
        not resolved
        and incident.notified_at is not None
        and (incident.notified_at - incident.opened_at).total_seconds() > 1
    )
    title = "RESOLVED" if resolved else "STILL FIRING" if reminder else "ALERT"
    return {
        "event": "alert_resolved" if resolved else "alert_reminder" if reminder else "alert",
        # A platform incident's key names what it is about (a worker, a tier); a tenant's is
        # an id, which the text and the link say in words.
        "title": f"{title} {rule_title(incident.rule)}"
        + (f": {incident.key}" if incident.tenant_id is None else ""),
        "text": incident.summary,
        "rule": incident.rule,
        "key": incident.key,
        "severity": incident.severity,
        "value": incident.value,
        "incident_id": str(incident.id),
        "opened_at": incident.opened_at.isoformat(),
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        "url": f"{settings.ALERTS['BASE_URL']}/dashboard/{_incident_page(incident)}",
        "runbook_url": runbook_url(incident.rule),
    }
