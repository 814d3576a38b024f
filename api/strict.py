"""Strict request bodies: a key the endpoint does not know is a 400 that names it.

A misspelt optional key (`max_retry`, `idempotent`) silently dropped would leave a task
that runs differently from what its author wrote, with a 201 saying all is well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.request import Request

from scheduler_app.ascii_numbers import ascii_int
from scheduler_app.errors import ValidationFailed


def unknown_field_errors(data: Any, known: Any) -> dict[str, list[str]]:
    """{"name": ["unknown field; allowed: ..."]} for every key of `data` not in `known`."""
    if not isinstance(data, Mapping):
        return {}
    allowed = sorted(known)
    hint = f"unknown field; allowed: {', '.join(allowed)}" if allowed else "unknown field"
    return {str(key): [hint] for key in sorted(data, key=str) if key not in known}


class StrictSerializer(serializers.Serializer):
    """A request serializer that refuses keys it has no field for (read-only ones included:
    writing an `id` or a `created_at` is a mistake the caller wants to hear about)."""

    def to_internal_value(self, data: Any) -> Any:
        writable = {name for name, field in self.fields.items() if not field.read_only}
        unknown = unknown_field_errors(data, writable)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if unknown and isinstance(error.detail, dict):
                raise serializers.ValidationError({**unknown, **error.detail}) from error
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


def refuse_body(request: Request) -> None:
    """For endpoints that take no body: any key sent is unknown (400 naming each)."""
    unknown = unknown_field_errors(request.data, ())
    if unknown:
        raise serializers.ValidationError(unknown)


class NoteInput(StrictSerializer):
    """The optional reason of a pause, cancel or delete: `{"note": "..."}` (kept with the
    pause, and in the audit log)."""

    note = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why (kept in the audit log)"
    )


def body_note(request: Request) -> str:
    """The request's optional `note` (the reason); any other key is a 400 naming it."""
    body = NoteInput(data=request.data if request.data else {})
    body.is_valid(raise_exception=True)
    return body.validated_data.get("note", "")


def query_int(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    """The query parameter `name` as an int from `low` to `high`; a 400 naming it otherwise."""
    value = ascii_int(request.query_params.get(name, str(default)), low=low, high=high)
    if value is None:
        raise ValidationFailed(f"{name} must be an integer from {low} to {high}", field=name)
    return value
