"""The one exception handler: domain and framework errors become 4xx with a stable `code`."""

from __future__ import annotations

import math
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from scheduler_app.errors import DomainError, ValidationErrors


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error dicts become {"schedule.expression": ["..."]}."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            flat.update(
                flatten_errors(value, f"{prefix}.{name}" if prefix and name else prefix or name)
            )
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]}
        flat = {}
        for index, item in enumerate(detail):
            flat.update(flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix or "non_field_errors": [str(detail)]}


def _body(code: str, message: str, *, field: str | None = None, errors: dict | None = None) -> dict:
    body: dict[str, Any] = {"code": code, "message": message}
    if field:
        body["field"] = field
    if errors:
        body["errors"] = errors
    return body


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, ValidationErrors):  # every mistake of a block, field by field
        every: dict[str, list[str]] = {}
        for error in exc.errors:
            every.setdefault(error.field or "non_field_errors", []).append(error.message)
        return Response(
            _body(exc.code, exc.message, field=exc.field, errors=every), status=exc.status_code
        )
    if isinstance(exc, DomainError):
        errors = {exc.field: [exc.message]} if exc.field else None
        response = Response(
            _body(exc.code, exc.message, field=exc.field, errors=errors), status=exc.status_code
        )
        if exc.retry_after is not None:
            response["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return response
    if isinstance(exc, RequestDataTooBig):
        return Response(
            _body(
                "payload_too_large",
                f"request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes "
                "(MAX_REQUEST_BODY_BYTES)",
            ),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, DataError):
        # A value PostgreSQL cannot hold (a NUL byte, an out-of-range number) in a filter or
        # a body: the client's input is wrong, and nothing was written.
        return Response(
            _body("invalid", "the request contains a value that cannot be stored or searched"),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, redis.RedisError):
        # Redis down, failing over or full (maxmemory, noeviction): what needed it did not
        # happen, and PostgreSQL, the record, was not left half-written by it (recorded runs
        # are rung again by the leader). The client may retry.
        response = Response(
            _body("unavailable", "the queue service is unavailable; retry shortly"),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "5"
        return response
    if isinstance(exc, Http404):
        return Response(_body("not_found", "not found"), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        first_field, messages = next(iter(errors.items()))
        field = None if first_field == "non_field_errors" else first_field
        message = f"{first_field}: {messages[0]}" if field else messages[0]
        return Response(
            _body("invalid", message, field=field, errors=errors),
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
        response.data = _body(str(code), str(detail))
    return response
