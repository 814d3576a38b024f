"""What `GET tasks/{id}/stats` and `GET dags/{id}/stats` answer (output only: the schema
the OpenAPI document and its conformance tests check)."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers_usage import ResourceUsageOutput


class QuantilesOutput(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True, help_text="seconds, within 1%")
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


class StatsSummaryOutput(serializers.Serializer):
    count = serializers.IntegerField(help_text="runs scheduled in the window")
    by_status = serializers.DictField(child=serializers.IntegerField())
    success_rate = serializers.FloatField(
        allow_null=True, help_text="success / finished (success, failed, timed out); null: none"
    )
    duration = QuantilesOutput(help_text="completed - started")
    lag = QuantilesOutput(help_text="started - scheduled")


class StatsPointOutput(StatsSummaryOutput):
    start = serializers.DateTimeField(help_text="the bucket's start (UTC)")


class StatsOutput(serializers.Serializer):
    window = serializers.CharField(help_text="as asked, e.g. 7d")
    bucket = serializers.ChoiceField(choices=["hour", "day"])
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    totals = StatsSummaryOutput()
    series = StatsPointOutput(many=True, help_text="one per bucket, oldest first")


class TaskStatsOutput(StatsOutput):
    resources = ResourceUsageOutput(
        help_text="CPU and peak memory over the task's recent runs (not the window), and a "
        "suggested resource_requirements"
    )
