"""Keyset (cursor) paging for the long, time-ordered lists: runs and DAG runs.

A cursor names the last row shown (its time and id); the next page is the rows strictly older,
so a page stays right while new runs arrive at the top (an offset would shift under them) and
costs the same deep in the history as on the first page (the (tenant, -scheduled_at) index).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from scheduler_app.errors import ValidationFailed


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int  # rows matching the filters, on every page
    next_cursor: str | None  # None on the last page


def cursor_encode(at: datetime, row_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{row_id}".encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at_text, id_text = raw.split("|", 1)
        at = parse_datetime(at_text)
        row_id = uuid.UUID(id_text)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValidationFailed("cursor is not one this page gave out", field="cursor") from error
    if at is None or at.tzinfo is None:
        raise ValidationFailed("cursor is not one this page gave out", field="cursor")
    return at, row_id


def cursor_page(
    rows: QuerySet, *, cursor: str | None, size: int, time_field: str = "scheduled_at"
) -> Page:
    """Newest first by (`time_field`, id); `size` rows after `cursor`, and the total count."""
    total = rows.count()
    ordered = rows.order_by(f"-{time_field}", "-id")
    if cursor:
        at, row_id = cursor_decode(cursor)
        ordered = ordered.filter(
            Q(**{f"{time_field}__lt": at}) | Q(**{time_field: at, "id__lt": row_id})
        )
    items = list(ordered[: size + 1])
    more = len(items) > size
    items = items[:size]
    last = items[-1] if more else None
    return Page(
        items=items,
        total=total,
        next_cursor=cursor_encode(getattr(last, time_field), last.id) if last else None,
    )
