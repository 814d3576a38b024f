"""The dashboard's Workers page, played as a tenant member: the fleet's numbers (every
worker's load, the queues, the schedulers: all tenants' work) are not shown, only the member's
own tenant's running runs per worker. Platform staff see the fleet, member or not."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from scheduler_app.fleet import registry
from scheduler_app.models import TaskExecution
from scheduler_app.redis_client import get_redis, redis_key
from tests.factories import make_queued_runs, make_task, make_worker_record

pytestmark = pytest.mark.django_db


def _running(task, worker_id: str) -> TaskExecution:
    [run] = make_queued_runs(task, 1, queue="normal", due=timezone.now())
    TaskExecution.platform.filter(id=run.id).update(
        status="running", worker_id=worker_id, started_at=timezone.now()
    )
    return run


@pytest.fixture
def registered_worker():
    name = f"fleet-{uuid.uuid4().hex[:6]}@h"
    registry.worker_record_save(make_worker_record(name))
    yield name
    get_redis().srem(redis_key("fleet:workers"), name)
    get_redis().delete(redis_key(f"fleet:worker:{name}"))


@pytest.fixture
def two_tenants_running(tenant_factory):
    acme, acme_admin = tenant_factory("acme")
    bravo, _ = tenant_factory("bravo")
    worker = f"shared-{uuid.uuid4().hex[:6]}@host"
    mine = _running(make_task(acme, name="acme-job", schedule={"type": "manual"}), worker)
    theirs = _running(
        make_task(bravo, name="bravo-secret-job", schedule={"type": "manual"}), worker
    )
    return acme_admin, worker, mine, theirs


def test_a_member_sees_only_their_runs_per_worker(two_tenants_running, registered_worker):
    member, worker, mine, theirs = two_tenants_running
    client = Client()
    client.force_login(member)
    for fragment in ("", "?fragment=1"):
        page = client.get("/dashboard/workers" + fragment).content.decode()
        assert worker in page and str(mine.id)[:8] in page and "acme-job" in page
        assert "bravo-secret-job" not in page and str(theirs.id)[:8] not in page
        # No fleet data: no other workers, loads, queue depths or schedulers.
        for fleet_only in ('id="workers"', 'id="queues"', 'id="schedulers"', registered_worker):
            assert fleet_only not in page, fleet_only


def test_platform_staff_see_the_fleet_without_a_membership(registered_worker):
    name = registered_worker
    staff = get_user_model().objects.create_user(username="ops", password="x", is_staff=True)
    client = Client()
    client.force_login(staff)
    response = client.get("/dashboard/workers?fragment=1")
    assert response.status_code == 200
    assert 'id="workers"' in response.content.decode() and name in response.content.decode()
