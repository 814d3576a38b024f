"""The dashboard's backfills page: progress of each, a cancel button for operators only,
another tenant's backfill out of reach."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from dags.models import Backfill
from dags.services.backfills import backfill_create
from scheduler_app.choices import Role
from scheduler_app.models import TaskExecution, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db

HOURLY = {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def _backfill(tenant, name="imports"):
    task = make_task(tenant, name=name, schedule=HOURLY)
    return backfill_create(
        tenant=tenant,
        task=task,
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=datetime(2026, 11, 1, 4, tzinfo=UTC),
        max_parallel=2,
    )


def test_the_page_shows_progress_and_cancel_works(signed_in, tenant):
    backfill = _backfill(tenant)
    assert TaskExecution.platform.filter(trigger="backfill").count() == 2  # max_parallel
    page = signed_in.get("/dashboard/backfills").content.decode()
    assert "imports" in page and "2 of 4 released" in page and "2 waiting" in page
    assert "backfill-cancel" in page
    response = signed_in.post(f"/dashboard/backfills/{backfill.id}/cancel")
    assert response.status_code == 302
    backfill.refresh_from_db()
    assert backfill.status == "cancelled"
    assert set(
        TaskExecution.platform.filter(trigger="backfill").values_list("status", flat=True)
    ) == {"cancelled"}
    assert "backfill-cancel" not in signed_in.get("/dashboard/backfills").content.decode()


def test_a_viewer_cannot_cancel_and_another_tenants_backfill_is_not_found(
    tenant_and_user, tenant, tenant_factory
):
    _tenant, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    client = Client()
    client.login(username=user.username, password="pw-123456")
    mine = _backfill(tenant)
    assert "backfill-cancel" not in client.get("/dashboard/backfills").content.decode()
    assert client.post(f"/dashboard/backfills/{mine.id}/cancel").status_code == 403
    other, _ = tenant_factory("globex")
    theirs = _backfill(other, name="their-imports")
    TenantMembership.platform.filter(user=user).update(role=Role.OPERATOR)
    assert "their-imports" not in client.get("/dashboard/backfills").content.decode()
    assert client.post(f"/dashboard/backfills/{theirs.id}/cancel").status_code == 404
    assert Backfill.platform.get(id=theirs.id).status == "running"
