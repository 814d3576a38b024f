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

Counted in PostgreSQL (`scheduler_app.services.rolling_budgets`): the charge commits or
rolls back with what it pays for, so a refused request stores and counts nothing. It is the
last write of its transaction (callers charge after their own writes), which keeps one
tenant's concurrent charges exact without deadlocks; other tenants are never slowed.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from scheduler_app.errors import OverBudget, PayloadTooLarge
from scheduler_app.monitoring.counters import record_budget_refusal
from scheduler_app.services.rolling_budgets import Budget, BudgetSpent, budget_charge, window_words

BUDGET = "payload_bytes"


class PayloadQuotaExceeded(OverBudget):
    code = "payload_quota_exceeded"


def payload_size(value: Any) -> int:
    """The bytes `value` takes as compact JSON (what the API received, near what is stored)."""
    if value is None:
        return 0
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def payload_cap_check(*, tenant_id: Any, value: Any, field: str) -> int:
    """`value`'s size, or PayloadTooLarge (413) naming `field` past PAYLOADS["MAX_BYTES"]."""
    size, cap = payload_size(value), int(settings.PAYLOADS["MAX_BYTES"])
    if size > cap:
        record_budget_refusal(tenant_id=str(tenant_id), budget="payload_size")
        raise PayloadTooLarge(
            f"{field} is {size:,} bytes as JSON; at most {cap:,} are taken", field=field
        )
    return size


def payload_budget() -> Budget:
    return Budget(
        name=BUDGET,
        limit=int(settings.PAYLOADS["TENANT_BYTES_PER_WINDOW"]),
        window=timedelta(seconds=int(settings.PAYLOADS["WINDOW_SECONDS"])),
    )


def payload_bytes_charge(
    *, tenant_id: Any, size: int, field: str, now: datetime | None = None
) -> None:
    """Count `size` bytes against the tenant's window, or raise PayloadQuotaExceeded (429).
    Call it last in the transaction that stores them (see the module's note); the raise
    rolls that transaction back, the charge with it."""
    if size <= 0:
        return
    budget = payload_budget()
    try:
        budget_charge(tenant_id=tenant_id, budget=budget, amount=size, now=now)
    except BudgetSpent as spent:
        record_budget_refusal(tenant_id=str(tenant_id), budget="payload_quota")
        raise PayloadQuotaExceeded(
            f"{field}: this tenant stored {spent.used - size:,} bytes of event payloads and "
            f"trigger parameters in the last {window_words(budget.window)}, and {size:,} more "
            f"would pass its quota of {budget.limit:,}",
            field=field,
            retry_after=spent.retry_after,
        ) from spent
