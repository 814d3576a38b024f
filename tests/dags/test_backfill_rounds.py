"""Backfills are a tenant's fan-out: a per-tenant limit on how many run at once, and
housekeeping rounds that take tenants in turn. The rounds are driven by hand here (the beat
leader calls the same function); tests/integration/test_backfill_fairness.py plays it on the
real beat and worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dags.models import Backfill
from dags.services.backfills import backfill_create, backfills_advance, backfills_in_turn
from scheduler_app.errors import LimitReached
from tests.factories import make_task

pytestmark = pytest.mark.django_db

HOURLY = {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}
END = datetime(2026, 1, 2, tzinfo=UTC)


def _task(tenant, name="hourly"):
    return make_task(tenant, name=name, schedule=HOURLY)


def _backfill(task, hours=24):
    return backfill_create(
        tenant=task.tenant, task=task, start=END - timedelta(hours=hours), end=END
    )


def test_a_backfill_past_the_tenants_limit_is_a_409_and_creates_nothing(
    api, tenant, tenant_factory, settings
):
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 2
    task = _task(tenant)
    body = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}
    for _ in range(2):
        assert api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json").status_code == 201
    refused = api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json")
    assert refused.status_code == 409
    assert refused.json()["code"] == "limit_reached"
    assert "at most 2 may run at once" in refused.json()["message"]
    assert Backfill.platform.filter(tenant=tenant).count() == 2
    # Another tenant's limit is its own.
    other, _ = tenant_factory("demo")
    _backfill(_task(other))
    # A finished one frees its slot.
    Backfill.platform.filter(tenant=tenant).update(status="completed")
    assert api.post(f"/api/v1/tasks/{task.id}/backfill", body, format="json").status_code == 201


def test_the_limit_is_checked_in_the_service_too(tenant, settings):
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 1
    task = _task(tenant)
    _backfill(task)
    with pytest.raises(LimitReached):
        _backfill(task)


def test_a_round_takes_every_tenant_in_turn_not_the_oldest_first(tenant_factory, settings):
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 50
    demo, _ = tenant_factory("demo")
    acme, _ = tenant_factory("acme")
    demo_task = _task(demo)
    crowd = [_backfill(demo_task) for _ in range(30)]  # older, many
    theirs = _backfill(_task(acme))  # newest, alone
    # A round of 5: acme's comes in the first round, beside demo's least recently advanced.
    first = backfills_in_turn(limit=5)
    assert theirs.id in first
    backfills_advance(limit=5)
    # Round after round, acme's is advanced every time while demo's take turns.
    for _ in range(6):
        ids = backfills_in_turn(limit=5)
        assert theirs.id in ids
        backfills_advance(limit=5)
    advanced = Backfill.platform.filter(id__in=[b.id for b in crowd], advanced_at__isnull=False)
    assert advanced.count() == 28  # 7 rounds x 4 of demo's: each of its own in turn


def test_tenants_outnumbering_a_round_are_served_in_turn(tenant_factory, settings):
    tenants = [tenant_factory(f"t{index}")[0] for index in range(5)]
    backfills = {t.slug: _backfill(_task(t)) for t in tenants}
    served: list[set] = []
    for _ in range(5):
        ids = set(backfills_in_turn(limit=2))
        served.append(ids)
        backfills_advance(limit=2)
    # Every tenant within three rounds of two, none twice before all had a turn.
    assert set().union(*served[:3]) == {b.id for b in backfills.values()}
