"""Does PostgreSQL answer writes? A tiny row written and read back in one transaction.

What the "leader failover" runbook checks first: a beat that lost its lock and a standby
that took it over may both be fine while the database underneath failed over to a replica
that refuses writes (`cannot execute UPDATE in a read-only transaction`), and then no fire
is recorded. A read would not tell; the write does. The probe's row is one per name, so it
never grows.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, transaction
from django.utils import timezone

from alerting.models import DatabaseWriteProbe

PROBE_NAME = "leader-failover"


@dataclass(frozen=True)
class WriteProbe:
    answers_writes: bool
    detail: str


def database_write_probe(*, now: datetime | None = None, name: str = PROBE_NAME) -> WriteProbe:
    now = now or timezone.now()
    token = uuid.uuid4()
    started = time.monotonic()
    try:
        with transaction.atomic():
            DatabaseWriteProbe.objects.update_or_create(
                name=name, defaults={"token": token, "written_at": now}
            )
            read_back = (
                DatabaseWriteProbe.objects.filter(name=name).values_list("token", flat=True).first()
            )
    except DatabaseError as error:
        said = (str(error).strip().splitlines() or [error.__class__.__name__])[0]
        return WriteProbe(False, f"the write was refused: {said[:200]}")
    elapsed_ms = (time.monotonic() - started) * 1000
    if read_back != token:
        return WriteProbe(False, "the row written was not the row read back")
    return WriteProbe(True, f"a row written and read back in {elapsed_ms:.0f} ms")
