"""The rows of an incidents table (dashboard/_incidents.html): each incident with its rule in
words, what it concerns by name and the link to it, and its runbook. The Incidents page,
the overview, a task's page and a DAG's page all show them (dashboard/incident_pages.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from alerting import selectors as alerting_selectors
from alerting.incident_words import rule_description, rule_title
from alerting.models import AlertIncident
from alerting.runbooks import runbook_url
from alerting.selectors import IncidentSubject
from scheduler_app.models import Tenant


def _subject_url(subject: IncidentSubject) -> str:
    if not subject.object_id and subject.kind != "tenant":
        return ""
    if subject.kind == "task":
        return reverse("dashboard:task", args=[subject.object_id])
    if subject.kind == "execution":
        return reverse("dashboard:execution", args=[subject.object_id])
    if subject.kind == "dag_run":
        return reverse("dashboard:dag-run", args=[subject.dag_id, subject.object_id])
    if subject.kind == "tenant":
        return reverse("dashboard:runs") + "?status=failed"
    return ""


def incident_rows(*, tenant: Tenant, incidents: Iterable[AlertIncident]) -> list[dict[str, Any]]:
    """What a row of an incidents table shows (dashboard/_incidents.html)."""
    incidents = list(incidents)
    subjects = alerting_selectors.incident_subjects(tenant=tenant, incidents=incidents)
    return [
        {
            "incident": incident,
            "title": rule_title(incident.rule),
            "description": rule_description(incident.rule),
            "subject": subjects[incident.id],
            "subject_url": _subject_url(subjects[incident.id]),
            "runbook_url": runbook_url(incident.rule),
        }
        for incident in incidents
    ]
