"""What the API shows of a run's checkpoint and of a task's resource usage (output only)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers import ExecutionOutput


class CheckpointSummaryOutput(serializers.Serializer):
    size_bytes = serializers.IntegerField()
    updated_at = serializers.DateTimeField()
    attempt = serializers.IntegerField(help_text="the attempt that saved it last")


class ExecutionLossOutput(serializers.Serializer):
    lost_at = serializers.DateTimeField()
    attempt = serializers.IntegerField()
    worker_id = serializers.CharField(help_text="the worker that was running it")
    reason = serializers.CharField()
    outcome = serializers.CharField(
        help_text="requeued (the same attempt back in the queue) or failed (worker_lost)"
    )


class ExecutionDetailOutput(ExecutionOutput):
    checkpoint = serializers.SerializerMethodField()
    losses = serializers.SerializerMethodField()

    class Meta(ExecutionOutput.Meta):
        fields = [*ExecutionOutput.Meta.fields, "checkpoint", "losses"]

    @extend_schema_field(ExecutionLossOutput(many=True))
    def get_losses(self, execution) -> list[dict]:
        """Each time the run's worker was lost while it ran (WORKER_LOST_REQUEUES)."""
        return ExecutionLossOutput(self.context.get("losses", []), many=True).data

    @extend_schema_field(CheckpointSummaryOutput(allow_null=True))
    def get_checkpoint(self, execution) -> dict | None:
        """Whether the run has a checkpoint, and its size (not its content: see
        `executions/{id}/checkpoint`); null when it has none."""
        summary = self.context.get("checkpoint")
        return CheckpointSummaryOutput(summary).data if summary else None


class CheckpointOutput(serializers.Serializer):
    execution_id = serializers.UUIDField(help_text="the execution asked about")
    chain_id = serializers.UUIDField(help_text="the run's first attempt, which keys it")
    saved_by_execution_id = serializers.UUIDField(help_text="the attempt that saved it last")
    attempt = serializers.IntegerField()
    size_bytes = serializers.IntegerField()
    saves = serializers.IntegerField()
    updated_at = serializers.DateTimeField()
    state = serializers.JSONField(allow_null=True, help_text="a python handler's (masked)")
    file_text = serializers.CharField(
        allow_null=True,
        help_text="a shell task's checkpoint file (masked; undecodable bytes as U+FFFD)",
    )


class UsageQuantilesOutput(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)


class ResourceUsageOutput(serializers.Serializer):
    runs = serializers.IntegerField(help_text="recent finished runs with a measured usage")
    cpu_seconds = UsageQuantilesOutput(help_text="CPU seconds (user + system) per run")
    peak_memory_bytes = UsageQuantilesOutput(help_text="peak resident memory per run")
    requested = serializers.DictField(
        help_text="what the task asks (handler.resource_requirements), in the same units"
    )
    suggested_resource_requirements = serializers.DictField(
        allow_null=True,
        help_text="p95 x 1.3, rounded up (docs/tasks/sizing.md); null: too few runs measured",
    )


class OverprovisionedTaskOutput(serializers.Serializer):
    task_id = serializers.UUIDField()
    task_name = serializers.CharField()
    tenant = serializers.CharField(help_text="the tenant's slug")
    priority = serializers.IntegerField()
    usage = ResourceUsageOutput()
    used_share = serializers.DictField(
        child=serializers.FloatField(), help_text="{resource: p95 use / ask}, each <= 0.1"
    )
