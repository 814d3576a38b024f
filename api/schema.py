"""OpenAPI extras: how API keys appear in the schema, and shared response shapes."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from api.strict import StrictSerializer


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "api.api_keys.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key tsk_...` (or the X-API-Key header)",
        }


class ProviderTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.oidc_auth.ProviderTokenAuthentication"
    name = "providerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "an access token of the identity provider (single sign-on: "
            "OIDC_ISSUER); tenant and role from its groups",
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
    joined = serializers.ChoiceField(
        choices=["", "singleton", "debounce"],
        help_text="'' for a new run (202); 'singleton': the key's active run answered (200); "
        "'debounce': the key's pending run took this trigger's parameters (202)",
    )
    existing = serializers.BooleanField(help_text="the run existed before this trigger")
    trigger_count = serializers.IntegerField(help_text="the triggers this run has answered")
    scheduled_at = serializers.DateTimeField()


class DeadLetterOutcomeOutput(serializers.Serializer):
    execution_id = serializers.CharField()
    name = serializers.CharField(help_text="its task, or its DAG and node")
    outcome = serializers.ChoiceField(
        choices=["retried", "already_handled", "refused", "not_found", "removed"]
    )
    detail = serializers.CharField()
    new_execution_id = serializers.UUIDField(allow_null=True)


class RetriedAllOutput(serializers.Serializer):
    retried = serializers.IntegerField()
    results = DeadLetterOutcomeOutput(many=True)


class RetriedOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()


class FireTimeOutput(serializers.Serializer):
    utc = serializers.CharField()
    local = serializers.CharField()


class TimelineEntryOutput(FireTimeOutput):
    skipped = serializers.BooleanField(help_text="A calendar exclusion skips this fire.")
    reason = serializers.CharField(help_text="Why it is skipped (empty when it fires).")


class PreviewOutput(serializers.Serializer):
    timezone = serializers.CharField()
    fire_times = FireTimeOutput(many=True, help_text="The next fires (none of them skipped).")
    timeline = TimelineEntryOutput(
        many=True, help_text="The same fires with the ones `schedule.exclude` skips among them."
    )


class LogsOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()
    status = serializers.CharField()
    truncated = serializers.BooleanField()
    lines = serializers.ListField(child=serializers.CharField())


_PAGES: dict[tuple[str, bool], type[serializers.Serializer]] = {}


def page_of(item: type[serializers.Serializer], *, cursor: bool = False):
    """The schema of a paginated list of `item` (page pagination, or cursor without count)."""
    key = (item.__name__, cursor)
    if key not in _PAGES:
        fields: dict[str, serializers.Field] = {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
        }
        if not cursor:
            fields["count"] = serializers.IntegerField()
        name = f"{item.__name__.removesuffix('Output')}{'Cursor' if cursor else ''}Page"
        _PAGES[key] = type(name, (serializers.Serializer,), fields)
    return _PAGES[key]


class SchedulerAutoSchema(AutoSchema):
    """Operation ids that stay unique for APIViews: a GET on a collection is `<name>_list`.

    drf-spectacular guesses list-ness from viewsets; our views are plain APIViews, so the
    collection and the detail GET would both be `<name>_retrieve`."""

    def get_operation_id(self) -> str:
        operation_id = super().get_operation_id()
        collection = not self.path.rstrip("/").endswith("}")
        if self.method == "GET" and collection and operation_id.endswith("_retrieve"):
            return operation_id.removesuffix("_retrieve") + "_list"
        return operation_id


def _strict_serializers() -> list[type]:
    found, todo = [], [StrictSerializer]
    while todo:
        for subclass in todo.pop().__subclasses__():
            found.append(subclass)
            todo.append(subclass)
    return found


def strict_request_bodies(result: dict, generator, request, public) -> dict:
    """drf-spectacular post-processing hook: a request body that refuses unknown keys
    (api.strict) says so with `additionalProperties: false`."""
    names = {cls.__name__.removesuffix("Serializer") for cls in _strict_serializers()}
    for name, component in result.get("components", {}).get("schemas", {}).items():
        base = name.removeprefix("Patched").removesuffix("Request")
        if base in names and component.get("type") == "object":
            component["additionalProperties"] = False
    return result
