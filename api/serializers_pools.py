"""A tenant's pools in the API: input shapes (the service validates the values and names the
field it refuses) and the output with what each pool has in use."""

from __future__ import annotations

from rest_framework import serializers

from api.strict import StrictSerializer
from scheduler_app.models import Pool


class PoolInput(StrictSerializer):
    name = serializers.CharField(max_length=100)
    slots = serializers.IntegerField(min_value=1, max_value=100_000)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class PoolUpdateInput(StrictSerializer):
    slots = serializers.IntegerField(required=False, min_value=1, max_value=100_000)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class PoolOutput(serializers.ModelSerializer):
    running = serializers.SerializerMethodField(help_text="slots held by running runs now")
    waiting = serializers.SerializerMethodField(help_text="runs waiting for a slot")

    class Meta:
        model = Pool
        fields = ["name", "slots", "description", "running", "waiting", "created_at", "updated_at"]

    def _usage(self, pool: Pool) -> dict[str, int]:
        return (self.context.get("usage") or {}).get(pool.name, {"running": 0, "waiting": 0})

    def get_running(self, pool: Pool) -> int:
        return self._usage(pool)["running"]

    def get_waiting(self, pool: Pool) -> int:
        return self._usage(pool)["waiting"]
