from __future__ import annotations

from rest_framework import serializers

from dags.models import Dag, DagNodeState, DagRun
from scheduler_app.api.strict import StrictSerializer


class DagOutput(serializers.ModelSerializer):
    schedule = serializers.SerializerMethodField()
    definition = serializers.SerializerMethodField()

    class Meta:
        model = Dag
        fields = [
            "id",
            "name",
            "description",
            "version",
            "schedule",
            "failure_policy",
            "max_active_runs",
            "sla_seconds",
            "catchup",
            "overlap",
            "enabled",
            "paused",
            "source",
            "next_fire_at",
            "last_fired_at",
            "created_at",
            "updated_at",
            "definition",
        ]

    def get_schedule(self, dag: Dag) -> dict:
        if dag.event_trigger:
            return {"type": "event", **dag.event_trigger}
        return {
            "type": dag.schedule_type,
            "expression": dag.schedule_expression,
            "timezone": dag.timezone,
            "run_at": dag.run_at,
        }

    def get_definition(self, dag: Dag) -> dict | None:
        versions = self.context.get("versions") or {}
        version = versions.get(dag.id)
        return version.spec if version is not None else None


class DagSavedOutput(DagOutput):
    """A created or updated DAG, with why some of its nodes may not run yet (no live worker
    offers their handler type: their runs wait for one)."""

    warnings = serializers.SerializerMethodField()

    class Meta(DagOutput.Meta):
        fields = [*DagOutput.Meta.fields, "warnings"]

    def get_warnings(self, dag: Dag) -> list[str]:
        return list(self.context.get("warnings") or [])


class DagRunOutput(serializers.ModelSerializer):
    dag_id = serializers.UUIDField()
    version = serializers.IntegerField(source="version.number")

    class Meta:
        model = DagRun
        fields = [
            "id",
            "dag_id",
            "version",
            "status",
            "trigger",
            "scheduled_at",
            "parameters",
            "started_at",
            "completed_at",
            "created_at",
        ]


class NodeOutput(serializers.ModelSerializer):
    class Meta:
        model = DagNodeState
        fields = [
            "node_id",
            "status",
            "remaining_upstream",
            "execution_id",
            "attempts",
            "map_total",
            "map_finished",
            "result",
            "error_message",
            "started_at",
            "completed_at",
        ]


class DagTriggerInput(StrictSerializer):
    parameters = serializers.DictField(required=False, allow_null=True)


class DagRunDetailOutput(DagRunOutput):
    """A run with every node's state (the schema of the run detail, cancel and retry)."""

    nodes = NodeOutput(many=True, read_only=True)
    # wait_for_event nodes: {node_id, name, match, status, started_at, deadline, event_id,
    # resolved_at}
    event_waits = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta(DagRunOutput.Meta):
        fields = [*DagRunOutput.Meta.fields, "nodes", "event_waits"]
