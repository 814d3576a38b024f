"""`Idempotency-Key` on create and trigger: a repeat gets the first answer, and acts once.

The record is inserted in the same transaction as the work; a concurrent repeat blocks on
the unique index until the first commits, then fails its insert and replays the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_app.errors import ValidationFailed
from scheduler_app.models import IdempotencyRecord, Tenant

HEADER = "HTTP_IDEMPOTENCY_KEY"


class _Undo(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _replay(record: IdempotencyRecord) -> Response:
    return Response(record.body, status=record.status_code, headers={"Idempotent-Replayed": "true"})


def idempotent(request: Request, *, tenant: Tenant, produce: Callable[[], Response]) -> Response:
    key = request.META.get(HEADER, "")
    if not key:
        return produce()
    if len(key) > 255:
        raise ValidationFailed(
            "Idempotency-Key is longer than 255 characters", field="Idempotency-Key"
        )
    route = f"{request.method} {request.path}"[:255]
    cutoff = timezone.now() - timedelta(hours=settings.IDEMPOTENCY_TTL_HOURS)
    IdempotencyRecord.objects.filter(
        tenant=tenant, key=key, route=route, created_at__lt=cutoff
    ).delete()
    existing = IdempotencyRecord.objects.filter(tenant=tenant, key=key, route=route).first()
    if existing is not None:
        return _replay(existing)
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                tenant=tenant, key=key, route=route, status_code=0, body=None
            )
            response = produce()
            if response.status_code >= 400:
                raise _Undo(response)
            record.status_code = response.status_code
            record.body = json.loads(JSONRenderer().render(response.data) or b"null")
            record.save(update_fields=["status_code", "body"])
            return response
    except _Undo as undo:
        return undo.response
    except IntegrityError:
        existing = IdempotencyRecord.objects.filter(tenant=tenant, key=key, route=route).first()
        if existing is None:
            raise
        return _replay(existing)
