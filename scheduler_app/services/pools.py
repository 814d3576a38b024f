"""A tenant's named pools (create, resize, delete), and the check that a task names only a
pool of its own tenant. A resize is one UPDATE: the next claim reads the new size
(`services.flow_admission`), so it takes effect at once, and a pool made larger (or created
again) hands its new slots to its oldest waiting runs in the same transaction; a pool made
smaller lets no new run in until enough of its running ones have ended, and stops none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.flow_spec import MAX_POOL_SLOTS, POOL_NAME
from scheduler_app.models import Pool, Tenant
from scheduler_app.services.audit import audit_action
from scheduler_app.services.flow_admission import flow_waiters_wake


def _slots(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POOL_SLOTS:
        raise ValidationFailed(
            f"slots must be a whole number from 1 to {MAX_POOL_SLOTS}", field="slots"
        )
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not POOL_NAME.match(value):
        raise ValidationFailed(
            "name must be letters, digits, '_', '.' or '-' (at most 100)", field="name"
        )
    return value


def _description(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 2000:
        raise ValidationFailed(
            "description must be text of at most 2000 characters", field="description"
        )
    return value


def _shown(pool: Pool) -> dict[str, Any]:
    return {"name": pool.name, "slots": pool.slots, "description": pool.description}


def _waiters_hand_on(pool: Pool, *, slots: int) -> None:
    """Slots that came to be (a pool created or made larger) go to its oldest waiting runs at
    once, as a finish's freed slots do, instead of at their recheck."""
    if slots > 0:
        flow_waiters_wake(
            released=[{f"p:{pool.tenant_id}:{pool.name}": slots}], now=pool.updated_at
        )


def pool_create(*, tenant: Tenant, name: Any, slots: Any, description: Any = "") -> Pool:
    now = timezone.now()
    pool = Pool(
        tenant=tenant,
        name=_name(name),
        slots=_slots(slots),
        description=_description(description),
        created_at=now,
        updated_at=now,
    )
    try:
        with transaction.atomic():
            pool.save(force_insert=True)
            _waiters_hand_on(pool, slots=pool.slots)  # runs of a pool that was deleted
    except IntegrityError as error:
        raise Conflict(f"a pool named {pool.name!r} already exists", field="name") from error
    audit_action(
        tenant=tenant, verb="pool.create", object_type="pool", object_id=pool.id, after=_shown(pool)
    )
    return pool


def pool_update(*, pool: Pool, changes: Mapping[str, Any]) -> Pool:
    """Resize (`slots`) or describe a pool; its name is how tasks find it and does not change."""
    unknown = sorted(set(changes) - {"slots", "description"})
    if unknown:
        field = unknown[0]
        raise ValidationFailed(
            f"{field} cannot be changed (only slots and description)", field=field
        )
    before = _shown(pool)
    grown = 0
    if "slots" in changes:
        slots = _slots(changes["slots"])
        grown, pool.slots = max(0, slots - pool.slots), slots
    if "description" in changes:
        pool.description = _description(changes["description"])
    pool.updated_at = timezone.now()
    with transaction.atomic():
        Pool.objects.filter(id=pool.id, tenant_id=pool.tenant_id).update(
            slots=pool.slots, description=pool.description, updated_at=pool.updated_at
        )
        _waiters_hand_on(pool, slots=grown)
    after = _shown(pool)
    audit_action(
        tenant=pool.tenant,
        verb="pool.update",
        object_type="pool",
        object_id=pool.id,
        before={k: v for k, v in before.items() if after[k] != v},
        after={k: v for k, v in after.items() if before[k] != v},
    )
    return pool


def pool_delete(*, pool: Pool) -> None:
    """Delete a pool. Tasks that name it keep the name; their runs wait (a pool that is not
    there has no slots) until a pool of that name is created again."""
    Pool.objects.filter(id=pool.id, tenant_id=pool.tenant_id).delete()
    audit_action(
        tenant=pool.tenant,
        verb="pool.delete",
        object_type="pool",
        object_id=pool.id,
        before=_shown(pool),
    )


def pool_names_check(*, tenant_id: Any, fields: Mapping[str, Any]) -> None:
    """A task check (`task_checks`): the pool a task names is one of its tenant's (another
    tenant's pool is as unknown as one that does not exist)."""
    name = (fields.get("flow_control") or {}).get("pool")
    if name and not Pool.objects.filter(tenant_id=tenant_id, name=name).exists():
        raise ValidationFailed(f"pool {name!r} is not a pool of this tenant", field="pool")
