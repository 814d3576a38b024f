"""What a tenant may store of the payloads it supplies at run time: event payloads and the
parameters of a trigger (task or DAG). Both end up stored (the event row, each run's
parameters) and kept for days: 60 events of 900 KiB a few seconds apart grew the events
table by 500 MiB a minute.

Two budgets (settings.PAYLOADS):
- a size cap on each one, measured as compact JSON: over it, 413 `payload_too_large` naming
  the field (checked before anything is written);
- bytes per tenant over a rolling window (TENANT_BYTES_PER_WINDOW per WINDOW_SECONDS): over
  it, 429 `payload_quota_exceeded` with Retry-After (when enough of the window's oldest
  bytes have aged out for this request to fit).

Counted in PostgreSQL, the only counter and the truth: `PayloadUsage` holds the bytes of
each 1/60th of the window, charged in the transaction that stores them, so a refused or
rolled-back request counts nothing and no outage of another store can let bytes through
uncounted or lose them. A charge is the last write of its transaction (callers charge after
their own writes): the slice's row lock, which makes concurrent charges of one tenant see
each other, is then held only until the commit, and no transaction waits for another lock
while holding it (no deadlock). Other tenants' charges use other rows: never slowed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from scheduler_app.errors import OverBudget, TooLarge
from scheduler_app.models import PayloadUsage
from scheduler_app.monitoring.counters import record_budget_refusal

SLICES = 60
# Slices are cut from this instant (any fixed one: every process cuts the same slices).
EPOCH = datetime(2001, 1, 1, tzinfo=UTC)


class PayloadQuotaExceeded(OverBudget):
    code = "payload_quota_exceeded"


def payload_size(value: Any) -> int:
    """The bytes `value` takes as compact JSON (what the API received, near what is stored)."""
    if value is None:
        return 0
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def payload_cap_check(*, tenant_id: Any, value: Any, field: str) -> int:
    """`value`'s size, or TooLarge (413) naming `field` when it is over PAYLOADS["MAX_BYTES"]."""
    size, cap = payload_size(value), int(settings.PAYLOADS["MAX_BYTES"])
    if size > cap:
        record_budget_refusal(tenant_id=str(tenant_id), budget="payload_size")
        raise TooLarge(f"{field} is {size:,} bytes as JSON; at most {cap:,} are taken", field=field)
    return size


def payload_bytes_charge(
    *, tenant_id: Any, size: int, field: str, now: datetime | None = None
) -> None:
    """Count `size` bytes against the tenant's window, or raise PayloadQuotaExceeded (429).
    Call it last in the transaction that stores them (see the module's note); the raise
    rolls that transaction back, the charge with it."""
    if size <= 0:
        return
    now = now or timezone.now()
    window = timedelta(seconds=int(settings.PAYLOADS["WINDOW_SECONDS"]))
    quota = int(settings.PAYLOADS["TENANT_BYTES_PER_WINDOW"])
    width = window / SLICES
    slice_start = EPOCH + width * ((now - EPOCH) // width)
    oldest_kept = slice_start - window + width
    table = PayloadUsage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (tenant_id, bucket_start, bytes) VALUES (%s, %s, %s) "
            f"ON CONFLICT (tenant_id, bucket_start) DO UPDATE "
            f"SET bytes = {table}.bytes + EXCLUDED.bytes RETURNING xmax = 0",
            [tenant_id, slice_start, size],
        )
        if cursor.fetchone()[0]:  # a new slice began: the ones out of the window go
            cursor.execute(
                f"DELETE FROM {table} WHERE tenant_id = %s AND bucket_start < %s",
                [tenant_id, oldest_kept],
            )
        # A statement of its own, after the row lock: it sees every charge committed before.
        cursor.execute(
            f"SELECT bucket_start, bytes FROM {table} WHERE tenant_id = %s "
            "AND bucket_start >= %s ORDER BY bucket_start",
            [tenant_id, oldest_kept],
        )
        slices = cursor.fetchall()
    used = sum(bytes_ for _, bytes_ in slices)
    if used <= quota:
        return
    record_budget_refusal(tenant_id=str(tenant_id), budget="payload_quota")
    raise PayloadQuotaExceeded(
        f"{field}: this tenant stored {used - size:,} bytes of event payloads and trigger "
        f"parameters in the last {_duration(window)}, and {size:,} more would pass its quota "
        f"of {quota:,}",
        field=field,
        retry_after=_seconds_until_it_fits(slices, used=used, quota=quota, window=window, now=now),
    )


def _seconds_until_it_fits(
    slices: list[tuple[datetime, int]], *, used: int, quota: int, window: timedelta, now: datetime
) -> float:
    """When enough of the oldest slices leave the window for `used` to fit in `quota`."""
    for start, bytes_ in slices:
        used -= bytes_
        if used <= quota:
            return max(1.0, (start + window - now).total_seconds())
    return window.total_seconds()


def _duration(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    return f"{seconds} s"
