"""OpenAPI extras: how API keys appear in the schema, and shared response shapes."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "scheduler_app.api.api_keys.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key tsk_...` (or the X-API-Key header)",
        }


class ErrorOutput(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(required=False)
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class TriggeredOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()
    status = serializers.CharField()


class RetriedAllOutput(serializers.Serializer):
    retried = serializers.IntegerField()


class RetriedOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()


class FireTimeOutput(serializers.Serializer):
    utc = serializers.CharField()
    local = serializers.CharField()


class PreviewOutput(serializers.Serializer):
    timezone = serializers.CharField()
    fire_times = FireTimeOutput(many=True)


class LogsOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()
    status = serializers.CharField()
    truncated = serializers.BooleanField()
    lines = serializers.ListField(child=serializers.CharField())
