from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.strict import StrictSerializer
from dags.attempt_selectors import NodeAttempt
from dags.models import Dag, DagNodeState, DagRun
from scheduler_app.services.runbook_policy import runbook_policy_output


class DagOutput(serializers.ModelSerializer):
    schedule = serializers.SerializerMethodField()
    policy = serializers.SerializerMethodField()
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
            "policy",
            "owner",
            "enabled",
            "paused",
            "paused_at",
            "paused_by",
            "pause_note",
            "consecutive_failures",
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
        schedule = {
            "type": dag.schedule_type,
            "expression": dag.schedule_expression,
            "timezone": dag.timezone,
            "run_at": dag.run_at,
        }
        if dag.schedule_exclude:
            schedule["exclude"] = dag.schedule_exclude
        return schedule

    def get_policy(self, dag: Dag) -> dict:
        """The scheduling policy, in a task's shape (`catchup` and `overlap` are also kept at
        the top, where DAG definitions first had them)."""
        return {
            "catchup": dag.catchup,
            "overlap": dag.overlap,
            "jitter_seconds": dag.jitter_seconds,
            "start_at": _iso(dag.start_at),
            "end_at": _iso(dag.end_at),
            **runbook_policy_output(dag),
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
            "triggered_by",
            "scheduled_at",
            "parameters",
            "started_at",
            "completed_at",
            "created_at",
        ]


class NodeOutput(serializers.ModelSerializer):
    # Every attempt of the node in this run, oldest first, the current one last (a re-run
    # keeps the earlier ones): {attempt, current, trigger, triggered_by, status, execution_id,
    # execution_status, execution_attempts, last_execution_id, started_at, completed_at,
    # error_message, map_total, shard_executions}.
    history = serializers.SerializerMethodField()

    class Meta:
        model = DagNodeState
        fields = [
            "node_id",
            "status",
            "remaining_upstream",
            "execution_id",
            "attempts",
            "attempt_number",
            "attempt_trigger",
            "attempt_triggered_by",
            "map_total",
            "map_finished",
            "result",
            "error_message",
            "started_at",
            "completed_at",
            "history",
        ]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_history(self, node: DagNodeState) -> list[dict[str, Any]]:
        history = self.context.get("history") or {}
        return [node_attempt_output(attempt) for attempt in history.get(node.node_id, [])]


def node_attempt_output(attempt: NodeAttempt) -> dict[str, Any]:
    """One attempt as the API's run detail shows it (times in ISO 8601, UTC with Z)."""

    def iso(moment: datetime | None) -> str | None:
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    execution = attempt.execution
    return {
        "attempt": attempt.number,
        "current": attempt.current,
        "trigger": attempt.trigger,
        "triggered_by": attempt.triggered_by,
        "status": attempt.status,
        "execution_id": str(attempt.execution_id) if attempt.execution_id else None,
        "execution_status": execution.status if execution else None,
        "execution_attempts": attempt.execution_attempts,
        "last_execution_id": str(execution.id) if execution else None,
        "started_at": iso(attempt.started_at),
        "completed_at": iso(attempt.completed_at),
        "error_message": attempt.error_message,
        "map_total": attempt.map_total,
        "shard_executions": [
            {"shard_index": index, "execution_id": str(root)}
            for index, root in attempt.shard_executions
        ],
    }


class DagTriggerInput(StrictSerializer):
    parameters = serializers.DictField(required=False, allow_null=True)


class DagRunDetailOutput(DagRunOutput):
    """A run with every node's state (the schema of the run detail, cancel and retry)."""

    nodes = NodeOutput(many=True, read_only=True)
    # wait_for_event nodes: {node_id, name, match, status, started_at, deadline, event_id,
    # resolved_at}
    event_waits = serializers.ListField(child=serializers.DictField(), read_only=True)
    # sleep and sensor nodes: {node_id, kind, status, started_at, due_at, deadline,
    # seconds_left, deadline_seconds_left, interval_seconds, attempts, last_poked_at,
    # last_error, resolved_at} (api/dags/timer_output.py)
    timers = serializers.ListField(child=serializers.DictField(), read_only=True)

    # approval nodes: as GET /api/v1/approvals/{id} answers (api/dags/approval_views.py)
    approvals = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta(DagRunOutput.Meta):
        fields = [*DagRunOutput.Meta.fields, "nodes", "event_waits", "timers", "approvals"]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None
