"""Route the doorbells of tenants with a worker pool of their own to its queues
(`scheduler_app/tenant_pools.py` says why and how the pool is capped).

Called first by `ring`, before fair dispatch admits anything: a dedicated tenant's doorbells
are then admitted on its own queues (`tenant.acme.normal`), counted apart from the shared
tiers, so it neither fills a shared tier's fair share nor counts as a busy tenant there.
Sticky routing leaves these doorbells alone (`sticky.route`): a hint may name a shared
worker.

The slugs of the setting are turned into tenant ids once per TENANT_IDS_CACHE_SECONDS per
process (one query over the few named tenants); a failed refresh keeps the last answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from django.conf import settings

from scheduler_app.models import Tenant
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.tenant_pools import is_tenant_pool_queue, tenant_pool_queue

logger = logging.getLogger(__name__)

TENANT_IDS_CACHE_SECONDS = 30.0
# (the setting it was read for, read at (monotonic), {tenant id: slug})
_cache: tuple[tuple[tuple[str, int], ...], float, dict[str, str]] | None = None


def dedicated_tenants() -> dict[str, str]:
    """{tenant id: slug} of the tenants WORKER_TENANT_POOLS names ({} when it names none)."""
    global _cache
    pools = tuple(sorted(settings.WORKER_TENANT_POOLS.items()))
    if not pools:
        return {}
    now = time.monotonic()
    if _cache is not None and _cache[0] == pools and now - _cache[1] < TENANT_IDS_CACHE_SECONDS:
        return _cache[2]
    try:
        rows = Tenant.objects.filter(slug__in=[slug for slug, _ in pools]).values_list("id", "slug")
        found = {str(tenant_id): slug for tenant_id, slug in rows}
    except Exception:
        if _cache is None or _cache[0] != pools:
            raise  # no answer to keep: better not rung (re-rung later) than on shared workers
        logger.exception("could not read the dedicated tenants; routing by the last answer")
        return _cache[2]
    _cache = (pools, now, found)
    return found


def tenant_pools_route(bells: Sequence[Doorbell]) -> list[Doorbell]:
    """The doorbells, those of dedicated tenants moved to their tenant's queues."""
    bells = list(bells)
    dedicated = dedicated_tenants() if bells else {}
    if not dedicated:
        return bells
    return [
        replace(bell, queue=tenant_pool_queue(dedicated[bell.tenant_id], bell.queue))
        if bell.tenant_id in dedicated and not is_tenant_pool_queue(bell.queue)
        else bell
        for bell in bells
    ]


def dedicated_tenants_forget() -> None:
    """Read the dedicated tenants afresh on the next ring (a test that recreates them)."""
    global _cache
    _cache = None
