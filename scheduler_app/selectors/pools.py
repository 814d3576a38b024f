"""Reads of a tenant's pools (tenant-scoped: another tenant's pool is a 404), with what each
has in use now."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import QuerySet

from scheduler_app.choices import ExecutionStatus
from scheduler_app.errors import NotFound
from scheduler_app.models import Pool, TaskExecution, Tenant


def pool_list(*, tenant: Tenant) -> QuerySet[Pool]:
    return Pool.objects.filter(tenant=tenant).order_by("name")


def pool_get(*, tenant: Tenant, name: Any) -> Pool:
    pool = Pool.objects.filter(tenant=tenant, name=str(name)).select_related("tenant").first()
    if pool is None:
        raise NotFound("no such pool", field="name")
    return pool


def pool_usage(*, tenant: Tenant, names: list[str]) -> dict[str, dict[str, int]]:
    """{pool name: {"running": slots held, "waiting": runs waiting for it}}."""
    if not names:
        return {}
    keys = [f"p:{tenant.id}:{name}" for name in names]
    table = TaskExecution._meta.db_table
    usage = {name: {"running": 0, "waiting": 0} for name in names}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT h.key, sum(h.value::int) FROM {table} e, jsonb_each_text(e.flow_holds) h "
            "WHERE e.status = %s AND e.flow_holds IS NOT NULL AND e.flow_holds ?| %s::text[] "
            "AND h.key = ANY(%s) GROUP BY h.key",
            [ExecutionStatus.RUNNING.value, keys, keys],
        )
        for key, held in cursor.fetchall():
            usage[key.split(":", 2)[2]]["running"] = int(held)
        cursor.execute(
            f"SELECT waiting_for ->> 'key', count(*) FROM {table} WHERE tenant_id = %s "
            "AND status = %s AND waiting_for ->> 'kind' = 'pool' "
            "AND waiting_for ->> 'key' = ANY(%s) GROUP BY 1",
            [tenant.id, ExecutionStatus.PENDING.value, names],
        )
        for name, waiting in cursor.fetchall():
            usage[name]["waiting"] = int(waiting)
    return usage
