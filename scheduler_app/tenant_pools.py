"""Tenant worker pools (issue 29, item 5; the design document's compute isolation): a tenant
named in WORKER_TENANT_POOLS (`acme=8,globex=4`: tenant slug = slot cap) has queues of its
own, `tenant.<slug>.<tier>` (and `tenant.<slug>.<tier>.<capability>`), served only by
workers started for it (`manage.py tenant_worker acme`). Its runs never take a shared
worker's slot, and the shared pools' fair dispatch sees only the shared tenants.

Two bounds hold the cap: the tenant's workers' concurrency (the command gives the cap as
`--concurrency`), and the claim, which counts the tenant's running runs in PostgreSQL and
defers a run past the cap (`services.quotas`, as `worker_pool_slots`), so two workers
started for one tenant still run at most its cap at once.

Routing happens when a run is rung (`ringing/tenant_pools.py`), the one way a run reaches the
broker, so fires, triggers, retries, DAG waves and re-rung runs all take it. Pure: no Django.
"""

from __future__ import annotations

import re

from scheduler_app.choices import TIERS

TENANT_QUEUE_PREFIX = "tenant."
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MAX_POOL_SLOTS = 100_000


class TenantPoolsError(ValueError):
    pass


def tenant_pools_parse(raw: str) -> dict[str, int]:
    """`acme=8, globex=4` -> {"acme": 8, "globex": 4}; TenantPoolsError naming the entry."""
    pools: dict[str, int] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        slug, sep, slots = entry.partition("=")
        slug, slots = slug.strip(), slots.strip()
        if not sep or not _SLUG.match(slug):
            raise TenantPoolsError(
                f"WORKER_TENANT_POOLS: {entry!r} is not <tenant slug>=<slots> (acme=8)"
            )
        if not (slots.isascii() and slots.isdigit()) or not 1 <= int(slots) <= MAX_POOL_SLOTS:
            raise TenantPoolsError(
                f"WORKER_TENANT_POOLS: {slug}'s slots must be a whole number from 1 to "
                f"{MAX_POOL_SLOTS}, not {slots!r}"
            )
        if slug in pools:
            raise TenantPoolsError(f"WORKER_TENANT_POOLS names {slug} twice")
        pools[slug] = int(slots)
    return pools


def tenant_pool_queue(slug: str, queue: str) -> str:
    """The tenant's own queue for a run bound for `queue` (`normal`, `bulk.container`)."""
    return f"{TENANT_QUEUE_PREFIX}{slug}.{queue}"


def tenant_pool_queues(slug: str) -> list[str]:
    """The tier queues a worker started for `slug` consumes (its capability queues are added
    by the worker as for any tier: `scheduler_app.fleet.capabilities`)."""
    return [tenant_pool_queue(slug, tier) for tier in TIERS]


def is_tenant_pool_queue(queue: str) -> bool:
    return queue.startswith(TENANT_QUEUE_PREFIX)


def tenant_pool_tier(queue: str) -> str | None:
    """`tenant.acme.normal` -> `normal`; None for any other queue."""
    if not is_tenant_pool_queue(queue):
        return None
    _, _, rest = queue.removeprefix(TENANT_QUEUE_PREFIX).partition(".")
    return rest if rest in TIERS else None
