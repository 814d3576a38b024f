"""Cutting a log at the tenant's log storage quota."""

from __future__ import annotations

import pytest

from scheduler_app.models import Tenant
from scheduler_app.redis_client import get_redis
from scheduler_app.services.log_quota import log_bytes_release, log_usage_key, stored_log

pytestmark = pytest.mark.django_db

TEXT = "".join(f"2026-12-01T00:00:00Z [stdout] line {i}\n" for i in range(50))


def _tenant_with(tenant, *, limit: int, used: int) -> Tenant:
    Tenant.objects.filter(id=tenant.id).update(max_log_bytes=limit)
    get_redis().set(log_usage_key(tenant.id), used)
    from scheduler_app.services import log_quota

    log_quota._cache.clear()
    return Tenant.objects.get(id=tenant.id)


def test_a_log_that_fits_is_stored_whole(tenant):
    tenant = _tenant_with(tenant, limit=10_000, used=100)
    assert stored_log(tenant=tenant, text=TEXT, truncated=False) == (TEXT, False)


def test_a_log_over_the_quota_keeps_whole_lines_that_fit_then_the_marker(tenant):
    tenant = _tenant_with(tenant, limit=2000, used=1000)
    text, truncated = stored_log(tenant=tenant, text=TEXT, truncated=False)
    assert truncated and len(text.encode()) <= 1000
    head, marker = text.rstrip("\n").rsplit("\n", 1)
    assert TEXT.startswith(head + "\n")
    assert marker == (
        f"[log cut: tenant {tenant.slug} has used 1000 of its 2000 bytes of log storage "
        "(max_log_bytes); the run itself ran]"
    )


def test_a_tenant_over_its_quota_stores_only_the_marker(tenant):
    tenant = _tenant_with(tenant, limit=2000, used=5000)
    text, truncated = stored_log(tenant=tenant, text=TEXT, truncated=False)
    assert truncated and text.startswith("[log cut:") and text.count("\n") == 1


def test_retention_gives_the_bytes_back(tenant):
    _tenant_with(tenant, limit=2000, used=5000)
    log_bytes_release([{"tenant_id": tenant.id, "size_bytes": 1200}] * 2)
    assert int(get_redis().get(log_usage_key(tenant.id))) == 2600
