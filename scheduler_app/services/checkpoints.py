"""A run's checkpoints: saved at once when a handler asks (`context.checkpoint(state)`, a
shell task's checkpoint file), one row per run chain (`RunCheckpoint`), read back by the next
attempt of the same run.

Budgets (settings.CHECKPOINTS), per CONVENTIONS "Budgets":
- per checkpoint: MAX_BYTES as compact JSON (or the file's bytes); over it CheckpointRefused
  is raised in the handler, nothing is written and the previous checkpoint stands;
- per tenant: bytes written per rolling window (`rolling_budgets`, counted in PostgreSQL in
  the transaction that writes them), so a tenant's handler checkpointing in a tight loop
  spends its own budget and is refused, without slowing another tenant (other rows).

An upsert keyed by the chain: the save of a zombie attempt (its claim taken over) could still
overwrite the state of the attempt that replaced it, so a save names its attempt and never
replaces a checkpoint of a later attempt.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from handler_contract.base import CheckpointRefused
from scheduler_app.models import RunCheckpoint
from scheduler_app.monitoring.counters import record_budget_refusal
from scheduler_app.services.rolling_budgets import Budget, BudgetSpent, budget_charge, window_words

BUDGET = "checkpoint_bytes"


def checkpoint_cap() -> int:
    return int(settings.CHECKPOINTS["MAX_BYTES"])


def checkpoint_budget() -> Budget:
    return Budget(
        name=BUDGET,
        limit=int(settings.CHECKPOINTS["TENANT_BYTES_PER_WINDOW"]),
        window=timedelta(seconds=int(settings.CHECKPOINTS["WINDOW_SECONDS"])),
    )


def checkpoint_state_encode(state: Any) -> tuple[Any, int]:
    """`state` as stored (a JSON round trip) and its size; CheckpointRefused when it is not
    JSON or is over the cap."""
    try:
        text = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise CheckpointRefused(f"a checkpoint must be JSON: {error}") from error
    size = len(text.encode())
    _check_cap(size)
    return json.loads(text), size


def _check_cap(size: int) -> None:
    cap = checkpoint_cap()
    if size > cap:
        raise CheckpointRefused(
            f"checkpoint of {size:,} bytes is over the cap of {cap:,} (CHECKPOINT_MAX_BYTES)"
        )


def checkpoint_save(
    *,
    tenant_id: Any,
    chain_id: uuid.UUID,
    execution_id: uuid.UUID,
    attempt: int,
    state: Any = None,
    file_data: bytes | None = None,
    now: datetime | None = None,
) -> int:
    """Keep a run's checkpoint (a python handler's `state`, already masked, or a shell task's
    `file_data`), replacing the one before unless a later attempt wrote that; returns its
    size. CheckpointRefused over the cap or the tenant's budget (nothing written)."""
    now = now or timezone.now()
    if file_data is not None:
        size = len(file_data)
        _check_cap(size)
        stored_state = None
    else:
        stored_state, size = checkpoint_state_encode(state)
    state_field = RunCheckpoint._meta.get_field("state")
    table = RunCheckpoint._meta.db_table
    budget = checkpoint_budget()
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {table} AS c (chain_id, tenant_id, execution_id, attempt, "
                    "state, file_data, size_bytes, saves, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s) "
                    "ON CONFLICT (chain_id) DO UPDATE SET execution_id = EXCLUDED.execution_id, "
                    "attempt = EXCLUDED.attempt, state = EXCLUDED.state, "
                    "file_data = EXCLUDED.file_data, size_bytes = EXCLUDED.size_bytes, "
                    "saves = c.saves + 1, updated_at = EXCLUDED.updated_at "
                    "WHERE c.attempt <= EXCLUDED.attempt AND c.tenant_id = EXCLUDED.tenant_id",
                    [
                        chain_id,
                        tenant_id,
                        execution_id,
                        attempt,
                        state_field.get_db_prep_value(stored_state, connection, prepared=False),
                        file_data,
                        size,
                        now,
                    ],
                )
            # Last in the transaction (rolling_budgets' note): a refusal rolls the write back.
            budget_charge(tenant_id=tenant_id, budget=budget, amount=max(size, 1), now=now)
    except BudgetSpent as spent:
        record_budget_refusal(tenant_id=str(tenant_id), budget="checkpoint_bytes")
        raise CheckpointRefused(
            f"this tenant wrote {spent.used - size:,} bytes of checkpoints in the last "
            f"{window_words(budget.window)}; {size:,} more would pass its budget of "
            f"{budget.limit:,} (CHECKPOINT_TENANT_BYTES_PER_WINDOW)"
        ) from spent
    return size


def checkpoint_for_chain(*, tenant_id: Any, chain_id: uuid.UUID) -> RunCheckpoint | None:
    """The worker's read at the start of an attempt: its run's last checkpoint, of its own
    tenant only (a chain id of another tenant finds nothing)."""
    return RunCheckpoint.objects.filter(chain_id=chain_id, tenant_id=tenant_id).first()


# The expiry chore runs at most this often (the beat's housekeeping rounds are seconds apart;
# a day-old checkpoint may wait a minute more).
EXPIRE_EVERY = timedelta(minutes=1)
_last_expiry: list[datetime] = []


def checkpoints_expire_chore(now: datetime) -> int:
    """The housekeeping chore (`runs.apps`): `checkpoints_expire` once a minute."""
    if _last_expiry and now - _last_expiry[0] < EXPIRE_EVERY:
        return 0
    _last_expiry[:] = [now]
    return checkpoints_expire(now=now)


def checkpoints_expire(*, now: datetime | None = None, limit: int = 5000) -> int:
    """Delete checkpoints not written for CHECKPOINTS["RETENTION_SECONDS"] (housekeeping)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=int(settings.CHECKPOINTS["RETENTION_SECONDS"]))
    old = RunCheckpoint.platform.filter(updated_at__lt=cutoff).values_list("chain_id", flat=True)
    ids = list(old[:limit])
    if not ids:
        return 0
    deleted, _ = RunCheckpoint.platform.filter(chain_id__in=ids, updated_at__lt=cutoff).delete()
    return deleted


def execution_chain_id(
    *, execution_id: uuid.UUID, root_execution_id: uuid.UUID | None
) -> uuid.UUID:
    """A run's chain: its first attempt's id (a first attempt's own)."""
    return root_execution_id or execution_id
