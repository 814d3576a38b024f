"""Read an archive file back into the side table `RestoredExecution` for investigation."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.db import transaction
from django.utils.dateparse import parse_datetime

from data_lifecycle.models import RestoredExecution
from data_lifecycle.services.archive_store import read_rows

BATCH = 2000


def _when(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    parsed = parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    if parsed.tzinfo is None:  # an archive written without an offset holds UTC
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def executions_restore(*, location: str) -> int:
    """Load every execution of the archive at `location`; returns how many rows.

    Idempotent per file: rows restored earlier from the same file are replaced.
    """
    restored = 0
    with transaction.atomic():
        RestoredExecution.platform.filter(source=location).delete()
        batch: list[RestoredExecution] = []
        for row in read_rows(location):
            if "scheduled_at" not in row or "task_id" not in row:
                raise ValueError(f"{location} is not an executions archive")
            batch.append(
                RestoredExecution(
                    execution_id=uuid.UUID(str(row["id"])),
                    tenant_id=uuid.UUID(str(row["tenant_id"])),
                    task_id=uuid.UUID(str(row["task_id"])),
                    status=row.get("status", ""),
                    scheduled_at=_when(row["scheduled_at"]),
                    attempt=int(row.get("attempt") or 1),
                    row=row,
                    source=location,
                )
            )
            if len(batch) >= BATCH:
                RestoredExecution.objects.bulk_create(batch)
                restored += len(batch)
                batch = []
        RestoredExecution.objects.bulk_create(batch)
        restored += len(batch)
    return restored
