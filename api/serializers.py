"""Request shapes (types only; meaning is checked by the services) and response shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.timezone import now as utc_now
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.strict import StrictSerializer
from scheduler_app.choices import (
    SCHEDULE_TYPES_ACCEPTED,
    Backoff,
    Catchup,
    ExecutionStatus,
    Overlap,
    Trigger,
)
from scheduler_app.limits import (
    MAX_ATTEMPTS,
    MAX_DELAY_SECONDS,
    MAX_JITTER_SECONDS,
    PRIORITY_HIGHEST,
    PRIORITY_LOWEST,
    task_timeout_limit,
)
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.progress import progress_live_get_many
from scheduler_app.services.runbook_policy import (
    MAX_PAUSE_AFTER_FAILURES,
    MAX_REMAINING_RUNS,
    runbook_policy_output,
)
from scheduler_app.services.task_spec import schedule_block_errors
from schedules import MAX_EXPRESSION_LENGTH
from tracing.context import trace_id_of


class ScheduleInput(StrictSerializer):
    type = serializers.ChoiceField(
        choices=[*SCHEDULE_TYPES_ACCEPTED, "event"],
        help_text="`one-shot` is the same as `once`; `event` starts a run per matching event.",
    )
    expression = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_EXPRESSION_LENGTH
    )
    timezone = serializers.CharField(required=False, max_length=64, default="UTC")
    run_at = serializers.CharField(required=False, allow_null=True, max_length=64)
    scheduled_at = serializers.CharField(
        required=False, allow_null=True, max_length=64, help_text="The same as `run_at`."
    )
    exclude = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        allow_null=True,
        help_text='Calendar exclusions, each with an optional "reason": {"date": "2026-12-25"}, '
        '{"from": "2026-12-24", "to": "2027-01-01"}, {"cron": "* * * * 6,0"}, '
        '{"calendar": "holidays:DE-BY"}; read on the schedule\'s wall clock.',
    )
    # type "event": the event's name and the payload subset that starts a run.
    name = serializers.CharField(required=False, max_length=255)
    match = serializers.DictField(required=False)

    def to_internal_value(self, data: Any) -> Any:
        """Types first, then meaning (by the services' own check): the block's every
        mistake in one 400, field by field, those of the keys the types refused included
        (a wrong type and a wrong zone are two errors, not one after the other)."""
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            refused = error.detail if isinstance(error.detail, dict) else {}
            if not isinstance(data, Mapping) or not refused:
                raise
            rest = {key: item for key, item in data.items() if key not in refused}
            raise serializers.ValidationError(
                {**_schedule_meaning_errors(rest), **refused}
            ) from error
        meaning = _schedule_meaning_errors(value)
        if meaning:
            raise serializers.ValidationError(meaning)
        return value


def _schedule_meaning_errors(schedule: Mapping[str, Any]) -> dict[str, list[str]]:
    """{"timezone": ["unknown timezone ..."], ...}: the block's refusals, keyed relative to
    the block as DRF's nested errors are."""
    errors: dict[str, list[str]] = {}
    for error in schedule_block_errors(schedule, anchor=utc_now()):
        key = (error.field or "").removeprefix("schedule").lstrip(".") or "non_field_errors"
        errors.setdefault(key, []).append(error.message)
    return errors


class RetryPolicyInput(StrictSerializer):
    max_attempts = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ATTEMPTS)
    backoff = serializers.ChoiceField(choices=Backoff.choices, required=False)
    base_delay_seconds = serializers.FloatField(
        required=False, min_value=0, max_value=MAX_DELAY_SECONDS
    )
    max_delay_seconds = serializers.FloatField(
        required=False, min_value=0, max_value=MAX_DELAY_SECONDS
    )


class PolicyInput(StrictSerializer):
    """Scheduling policies; the service checks what depends on the schedule (jitter, window)."""

    catchup = serializers.ChoiceField(choices=Catchup.choices, required=False)
    overlap = serializers.ChoiceField(choices=Overlap.choices, required=False)
    jitter_seconds = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_JITTER_SECONDS
    )
    start_at = serializers.DateTimeField(required=False, allow_null=True)
    end_at = serializers.DateTimeField(required=False, allow_null=True)
    pause_after_failures = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_PAUSE_AFTER_FAILURES,
        help_text="After this many consecutive failed runs: check health_check, then retry "
        "once (healthy) or pause and tell the owner (unhealthy, or the retry failed)",
    )
    health_check = serializers.DictField(
        required=False,
        allow_null=True,
        help_text='{"url": ..., "expect_status": 200, "timeout_seconds": 5}: an http GET, '
        "through the http handler's SSRF guard",
    )
    remaining_runs = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_REMAINING_RUNS,
        help_text="The schedule pauses itself after this many more fires",
    )


class PauseInput(StrictSerializer):
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why it is paused"
    )


class HandlerInput(serializers.DictField):
    """Any JSON object with a `type`; the handler validation names the exact bad key."""

    def to_internal_value(self, data: Any) -> dict:
        value = super().to_internal_value(data)
        if "type" not in value:
            raise serializers.ValidationError({"type": ["This field is required."]})
        return value


class TaskInput(StrictSerializer):
    name = serializers.CharField(max_length=255)
    description = serializers.CharField(required=False, allow_blank=True, max_length=10000)
    schedule = ScheduleInput()
    handler = HandlerInput()
    # The limit is the installation's (SCHEDULER_MAX_TASK_TIMEOUT), read when the API loads.
    timeout_seconds = serializers.IntegerField(
        required=False, min_value=1, max_value=task_timeout_limit()
    )
    retry_policy = RetryPolicyInput(required=False)
    policy = PolicyInput(required=False)
    priority = serializers.IntegerField(
        required=False, min_value=PRIORITY_HIGHEST, max_value=PRIORITY_LOWEST
    )
    parameters = serializers.DictField(required=False)
    tags = serializers.ListField(child=serializers.CharField(max_length=64), required=False)
    notifications = serializers.DictField(required=False)
    idempotency_key = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=255,
        help_text='A run whose key already succeeded is skipped: "{{parameters.region}}:'
        '{{scheduled_date}}" (placeholders: parameters.<name>, scheduled_at, scheduled_date, '
        "scheduled_time)",
    )
    singleton = serializers.DictField(
        required=False,
        allow_null=True,
        help_text='At most one queued-or-running run per key: {"key": "{{parameters.account}}"}',
    )
    debounce = serializers.DictField(
        required=False,
        allow_null=True,
        help_text='Collapse a key\'s triggers into one run: {"key", "seconds", "max_wait_seconds"}',
    )
    enabled = serializers.BooleanField(required=False)
    sla_seconds = serializers.IntegerField(required=False, allow_null=True)
    owner = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=255,
        help_text='Who the runbook tells: "user:<username>" or a notification target\'s name',
    )
    # Flow control (docs/tasks/flow-control.md); the shapes are checked by the service, which
    # names the field it refuses (`concurrency[0].max_running`).
    concurrency = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='[{"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": '
        '"queue"}] (strategies: queue, cancel_in_progress, cancel_newest, skip)',
    )
    pool = serializers.CharField(required=False, allow_null=True, max_length=100)
    pool_slots = serializers.IntegerField(required=False, allow_null=True)
    rate_limit = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='[{"key": "{{ parameters.account }}", "limit": 10, "per": "minute"}]',
    )


class TriggerInput(StrictSerializer):
    parameters = serializers.DictField(required=False)


class TaskOutput(serializers.ModelSerializer):
    schedule = serializers.SerializerMethodField()
    handler = serializers.JSONField(source="handler_config")
    retry_policy = serializers.SerializerMethodField()
    policy = serializers.SerializerMethodField()
    concurrency = serializers.SerializerMethodField()
    pool = serializers.SerializerMethodField()
    pool_slots = serializers.SerializerMethodField()
    rate_limit = serializers.SerializerMethodField()

    class Meta:
        model = TaskDefinition
        fields = [
            "id",
            "name",
            "description",
            "schedule",
            "handler",
            "timeout_seconds",
            "retry_policy",
            "policy",
            "priority",
            "parameters",
            "tags",
            "notifications",
            "idempotency_key",
            "singleton",
            "debounce",
            "concurrency",
            "pool",
            "pool_slots",
            "rate_limit",
            "sla_seconds",
            "owner",
            "enabled",
            "paused",
            "paused_at",
            "paused_by",
            "pause_note",
            "consecutive_failures",
            "next_fire_at",
            "last_fired_at",
            "created_at",
            "updated_at",
        ]

    def get_schedule(self, task: TaskDefinition) -> dict:
        if task.event_trigger:
            return {"type": "event", **task.event_trigger}
        schedule: dict[str, Any] = {"type": task.schedule_type, "timezone": task.timezone}
        if task.schedule_expression:
            schedule["expression"] = task.schedule_expression
        if task.run_at:
            schedule["run_at"] = task.run_at.isoformat().replace("+00:00", "Z")
        if task.schedule_exclude:
            schedule["exclude"] = task.schedule_exclude
        return schedule

    def get_concurrency(self, task: TaskDefinition) -> list[dict[str, Any]]:
        return (task.flow_control or {}).get("concurrency", [])

    def get_pool(self, task: TaskDefinition) -> str | None:
        return (task.flow_control or {}).get("pool")

    def get_pool_slots(self, task: TaskDefinition) -> int | None:
        return (task.flow_control or {}).get("pool_slots")

    def get_rate_limit(self, task: TaskDefinition) -> list[dict[str, Any]]:
        return (task.flow_control or {}).get("rate_limit", [])

    def get_retry_policy(self, task: TaskDefinition) -> dict:
        return {
            "max_attempts": task.max_attempts,
            "backoff": task.backoff,
            "base_delay_seconds": task.base_delay_seconds,
            "max_delay_seconds": task.max_delay_seconds,
        }

    def get_policy(self, task: TaskDefinition) -> dict:
        return {
            "catchup": task.catchup,
            "overlap": task.overlap,
            "jitter_seconds": task.jitter_seconds,
            "start_at": _iso(task.start_at),
            "end_at": _iso(task.end_at),
            **runbook_policy_output(task),
        }


class TaskSavedOutput(TaskOutput):
    """A created or updated task, with why it may not run yet (no live worker offers its
    handler type: its runs wait for one)."""

    warnings = serializers.SerializerMethodField()

    class Meta(TaskOutput.Meta):
        fields = [*TaskOutput.Meta.fields, "warnings"]

    def get_warnings(self, task: TaskDefinition) -> list[str]:
        return list(self.context.get("warnings") or [])


def _iso(moment) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


class ExecutionListOutput(serializers.ListSerializer):
    """Reads the live progress of the page's running executions in one round trip."""

    def to_representation(self, data):
        executions = list(data.all() if hasattr(data, "all") else data)
        self.child.live_progress = progress_live_get_many(
            str(e.id) for e in executions if e.status == ExecutionStatus.RUNNING
        )
        return super().to_representation(executions)


class ExecutionOutput(serializers.ModelSerializer):
    task_id = serializers.UUIDField()
    task_name = serializers.CharField(source="task.name")
    duration_seconds = serializers.SerializerMethodField()
    schedule_lag_seconds = serializers.FloatField(read_only=True)
    progress = serializers.SerializerMethodField()
    trace_id = serializers.SerializerMethodField()
    rerun_of = serializers.SerializerMethodField()
    waiting_for = serializers.SerializerMethodField(
        help_text='Why a pending run waits on a flow-control limit: {"kind": "concurrency"|'
        '"pool"|"rate_limit", "key": ..., "running": n, "max": m}; null otherwise'
    )

    class Meta:
        list_serializer_class = ExecutionListOutput
        model = TaskExecution
        fields = [
            "id",
            "task_id",
            "task_name",
            "status",
            "trigger",
            "priority",
            "queue",
            "scheduled_at",
            "queued_at",
            "started_at",
            "completed_at",
            "attempt",
            "max_attempts",
            "root_execution_id",
            "retry_of_id",
            "rerun_of",
            "worker_id",
            "lease_expires_at",
            "parameters",
            "result",
            "exit_code",
            "error_message",
            "error_class",
            "idempotency_key",
            "skipped_for_execution_id",
            "singleton_key",
            "debounce_key",
            "trigger_count",
            "dead_lettered",
            "dead_lettered_at",
            "duration_seconds",
            "schedule_lag_seconds",
            "progress",
            "cpu_seconds",
            "peak_memory_bytes",
            "trace_id",
            "waiting_for",
        ]

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "percent": {"type": "number"},
                "message": {"type": "string"},
                "updated_at": {"type": "string", "format": "date-time"},
            },
        }
    )
    def get_progress(self, execution: TaskExecution) -> dict | None:
        """The stored value once the run ended, the live one while it runs, else null."""
        if execution.progress is not None or execution.status != ExecutionStatus.RUNNING:
            return execution.progress
        live = getattr(self, "live_progress", None)
        if live is None:  # a single execution
            live = progress_live_get_many([str(execution.id)])
        return live.get(str(execution.id))

    @extend_schema_field({"type": "string", "nullable": True, "pattern": "^[0-9a-f]{32}$"})
    def get_trace_id(self, execution: TaskExecution) -> str | None:
        """The run's OpenTelemetry trace id (docs/operations/tracing.md), when its trace was
        sampled; null when tracing was off or the sampler left it out."""
        return trace_id_of(execution.traceparent)

    @extend_schema_field({"type": "object", "nullable": True})
    def get_waiting_for(self, execution: TaskExecution) -> dict[str, Any] | None:
        """Only a run still waiting says why: once admitted, ended or cancelled, it is no
        longer waiting on anything."""
        if execution.status != ExecutionStatus.PENDING:
            return None
        return execution.waiting_for

    @extend_schema_field({"type": "string", "format": "uuid", "nullable": True})
    def get_rerun_of(self, execution: TaskExecution) -> str | None:
        """The run this one re-ran (trigger `rerun`); null for any other run."""
        if execution.trigger == Trigger.RERUN and execution.retry_of_id:
            return str(execution.retry_of_id)
        return None

    def get_duration_seconds(self, execution: TaskExecution) -> float | None:
        if execution.started_at and execution.completed_at:
            return (execution.completed_at - execution.started_at).total_seconds()
        return None
