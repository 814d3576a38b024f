"""Shapes of /api/v1/incidents: an alert incident in words (its rule's title, what it is
about by name), its state, who acknowledged or resolved it, and its runbook."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from alerting.incident_words import rule_description, rule_title
from alerting.runbooks import runbook_url
from api.strict import StrictSerializer


class IncidentSubjectOutput(serializers.Serializer):
    type = serializers.CharField(help_text="task, execution, dag_run, tenant, quota or other")
    id = serializers.CharField(allow_blank=True, help_text="the object's id; blank if none")
    name = serializers.CharField()
    dag_id = serializers.CharField(allow_blank=True, help_text="a DAG run's DAG")


class IncidentOutput(serializers.Serializer):
    id = serializers.UUIDField()
    rule = serializers.CharField()
    title = serializers.SerializerMethodField()
    description = serializers.SerializerMethodField()
    state = serializers.CharField(help_text="open, acknowledged or resolved")
    severity = serializers.CharField()
    summary = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    concerns = serializers.SerializerMethodField()
    opened_at = serializers.DateTimeField()
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    acknowledged_by = serializers.CharField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    resolved_by = serializers.CharField(help_text="blank when its rule stopped firing")
    resolution_note = serializers.CharField()
    runbook_url = serializers.SerializerMethodField()

    def get_title(self, incident) -> str:
        return rule_title(incident.rule)

    def get_description(self, incident) -> str:
        return rule_description(incident.rule)

    def get_runbook_url(self, incident) -> str:
        return runbook_url(incident.rule)

    def get_concerns(self, incident) -> dict[str, Any]:
        subject = self.context["subjects"][incident.id]
        return IncidentSubjectOutput(
            {
                "type": subject.kind,
                "id": subject.object_id,
                "name": subject.name,
                "dag_id": subject.dag_id,
            }
        ).data


class IncidentResolveInput(StrictSerializer):
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="why, for the audit log"
    )
