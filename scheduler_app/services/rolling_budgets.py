"""Per-tenant budgets over a rolling window, counted in PostgreSQL: what a tenant may spend
of something per hour (bytes of payloads it stores, mails its notifications send).

PostgreSQL is the only counter and the truth: `BudgetUsage` holds what was spent in each
1/SLICES of the window, charged in the transaction that spends it, so a refused or
rolled-back request counts nothing, and no outage of another store lets anything through
uncounted. A charge should be the last write of its transaction: the slice's row lock,
which makes concurrent charges of one tenant and budget see each other, is then held only
until the commit, and no lock is awaited while holding it (no deadlock). Other tenants'
charges use other rows: never slowed. Slices out of the window are deleted when a new one
begins (the table keeps about SLICES rows per tenant and budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from scheduler_app.models import BudgetUsage

SLICES = 60
# Slices are cut from this instant (any fixed one: every process cuts the same slices).
EPOCH = datetime(2001, 1, 1, tzinfo=UTC)


class BudgetSpent(Exception):
    """The charge does not fit. Raised inside the caller's transaction: let it roll back
    (or roll it back) so the refused amount is not counted."""

    def __init__(self, *, used: int, limit: int, window: timedelta, retry_after: float) -> None:
        super().__init__(f"{used} of {limit} per {window}")
        self.used, self.limit, self.window, self.retry_after = used, limit, window, retry_after


@dataclass(frozen=True)
class Budget:
    name: str  # BudgetUsage.budget
    limit: int
    window: timedelta


def budget_charge(
    *, tenant_id: Any, budget: Budget, amount: int, now: datetime | None = None
) -> int:
    """Add `amount` to the tenant's window; returns what it has spent in it, this included,
    or raises BudgetSpent when that is over the budget's limit."""
    now = now or timezone.now()
    width = budget.window / SLICES
    slice_start = EPOCH + width * ((now - EPOCH) // width)
    oldest_kept = slice_start - budget.window + width
    table = BudgetUsage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (tenant_id, budget, bucket_start, amount) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, budget, bucket_start) "
            f"DO UPDATE SET amount = {table}.amount + EXCLUDED.amount RETURNING xmax = 0",
            [tenant_id, budget.name, slice_start, amount],
        )
        if cursor.fetchone()[0]:  # a new slice began: the ones out of the window go
            cursor.execute(
                f"DELETE FROM {table} WHERE tenant_id = %s AND budget = %s AND bucket_start < %s",
                [tenant_id, budget.name, oldest_kept],
            )
        # A statement of its own, after the row lock: it sees every charge committed before.
        cursor.execute(
            f"SELECT bucket_start, amount FROM {table} WHERE tenant_id = %s AND budget = %s "
            "AND bucket_start >= %s ORDER BY bucket_start",
            [tenant_id, budget.name, oldest_kept],
        )
        slices = cursor.fetchall()
    used = sum(spent for _, spent in slices)
    if used > budget.limit:
        raise BudgetSpent(
            used=used,
            limit=budget.limit,
            window=budget.window,
            retry_after=_seconds_until_it_fits(slices, used=used, budget=budget, now=now),
        )
    return used


def budget_spent(*, tenant_id: Any, budget: Budget, now: datetime | None = None) -> int:
    """What the tenant has spent of `budget` in its window (a read, nothing locked)."""
    now = now or timezone.now()
    width = budget.window / SLICES
    oldest_kept = EPOCH + width * ((now - EPOCH) // width) - budget.window + width
    spent = BudgetUsage.objects.filter(
        tenant_id=tenant_id, budget=budget.name, bucket_start__gte=oldest_kept
    ).values_list("amount", flat=True)
    return sum(spent)


def _seconds_until_it_fits(
    slices: list[tuple[datetime, int]], *, used: int, budget: Budget, now: datetime
) -> float:
    """When enough of the oldest slices leave the window for `used` to fit."""
    for start, spent in slices:
        used -= spent
        if used <= budget.limit:
            return max(1.0, (start + budget.window - now).total_seconds())
    return budget.window.total_seconds()


def window_words(window: timedelta) -> str:
    """ "hour", "24 hours", "900 s": the window as a message says it."""
    seconds = int(window.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    return f"{seconds} s"
