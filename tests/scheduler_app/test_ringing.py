"""ring(): admit, hold back, route, publish (real PostgreSQL, real Redis and its broker)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from django.utils import timezone

from beat.publisher import FirePublisher
from project.celery import app
from scheduler_app.fleet.records import sticky_queue_name, worker_record_save
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.fairness import fair_admit
from scheduler_app.ringing.ring import doorbells_hold_back, ring, ring_deferring_hold_back
from scheduler_app.ringing.sticky import sticky_hint_set
from tests.factories import make_queued_runs, make_task, make_worker_record


@pytest.fixture
def own_keys(settings, redis_client):
    """Fairness sets, sticky hints and the worker registry under a key prefix of this test's
    own, so no other test's tenants, hints or workers count here."""
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}ring-{uuid.uuid4().hex[:6]}:"
    settings.SCHEDULER = {**settings.SCHEDULER, "REDIS_KEY_PREFIX": prefix}
    yield prefix
    keys = redis_client.keys(f"{prefix}*")
    if keys:
        redis_client.delete(*keys)


def _rung_ids(redis_client, queue: str) -> list[str]:
    prefix = app.conf.broker_transport_options.get("global_keyprefix") or ""
    raw = redis_client.lrange(prefix + queue, 0, -1)
    redis_client.delete(prefix + queue)
    ids = []
    for message in reversed(raw):  # LPUSH: oldest last
        args = json.loads(base64.b64decode(json.loads(message)["body"]))[0]
        ids.extend(args[0] if isinstance(args[0], list) else args)
    return ids


def _runs(tenant, count: int) -> tuple[str, list[TaskExecution], list[Doorbell]]:
    queue = f"ring-{uuid.uuid4().hex[:6]}"  # a tier of the test's own: no worker reads it
    runs = make_queued_runs(make_task(tenant), count, queue=queue, due=timezone.now())
    bells = [Doorbell(str(run.id), str(tenant.id), queue) for run in runs]
    return queue, runs, bells


def _statuses(runs: list[TaskExecution]) -> list[str]:
    by_id = dict(
        TaskExecution.platform.filter(id__in=[r.id for r in runs]).values_list("id", "status")
    )
    return [by_id[run.id] for run in runs]


@pytest.mark.django_db
def test_a_held_back_doorbell_becomes_a_pending_row_and_is_not_published(
    tenant, redis_client, private_broker, own_keys, settings
):
    settings.FAIR_INFLIGHT_PER_TENANT = 2
    queue, runs, bells = _runs(tenant, 5)

    assert ring(bells, sticky=False) == 2

    assert _rung_ids(redis_client, queue) == [str(run.id) for run in runs[:2]]
    assert _statuses(runs) == ["queued"] * 2 + ["pending"] * 3
    for run in TaskExecution.platform.filter(id__in=[r.id for r in runs[2:]]):
        before = next(r for r in runs if r.id == run.id)
        assert run.queued_at is None and run.scheduled_at == before.scheduled_at


@pytest.mark.django_db
def test_a_sticky_hint_routes_to_the_worker_queue_under_its_admitted_tier(
    tenant, redis_client, private_broker, own_keys
):
    worker = f"ring-{uuid.uuid4().hex[:6]}@host"
    worker_record_save(make_worker_record(worker, concurrency=2))
    queue, _, bells = _runs(tenant, 2)
    sticky_hint_set(execution_id=bells[0].execution_id, worker_id=worker)

    assert ring(bells) == 2

    assert _rung_ids(redis_client, queue) == [bells[1].execution_id]  # no hint: its tier
    prefix = app.conf.broker_transport_options.get("global_keyprefix") or ""
    (message,) = redis_client.lrange(prefix + sticky_queue_name(worker), 0, -1)
    assert _rung_ids(redis_client, sticky_queue_name(worker)) == [bells[0].execution_id]
    # The worker releases the fairness slot of the tier the doorbell was admitted under.
    assert json.loads(message)["headers"]["tier"] == queue


@pytest.mark.django_db
def test_sticky_false_skips_the_hint(tenant, redis_client, private_broker, own_keys):
    worker = f"ring-{uuid.uuid4().hex[:6]}@host"
    worker_record_save(make_worker_record(worker, concurrency=2))
    queue, _, bells = _runs(tenant, 1)
    sticky_hint_set(execution_id=bells[0].execution_id, worker_id=worker)

    assert ring(bells, sticky=False) == 1
    assert _rung_ids(redis_client, queue) == [bells[0].execution_id]


def test_fair_admit_decides_in_redis_alone(redis_client, own_keys, settings):
    """No database here (pytest-django refuses any query in a test without the db mark):
    fair dispatch returns what it held back and writes no row."""
    settings.FAIR_INFLIGHT_PER_TENANT = 3
    queue = f"ring-{uuid.uuid4().hex[:6]}"
    bells = [Doorbell(str(uuid.uuid4()), "tenant-a", queue) for _ in range(5)]
    admission = fair_admit(bells)
    assert admission.admitted == bells[:3]
    assert admission.held_back == bells[3:]


@pytest.mark.django_db
def test_ringing_deferring_the_hold_back_leaves_the_rows_to_the_caller(
    tenant, redis_client, private_broker, own_keys, settings
):
    settings.FAIR_INFLIGHT_PER_TENANT = 1
    queue, runs, bells = _runs(tenant, 3)

    rung = ring_deferring_hold_back(bells, sticky=False)

    assert rung.sent == 1 and rung.held_back == bells[1:]
    assert _rung_ids(redis_client, queue) == [bells[0].execution_id]
    assert _statuses(runs) == ["queued"] * 3  # nothing written yet
    assert doorbells_hold_back(rung.held_back) == 2
    assert _statuses(runs) == ["queued", "pending", "pending"]


@pytest.mark.django_db(transaction=True)
def test_the_beat_publisher_puts_held_back_fires_to_pending_when_it_drains(
    tenant, redis_client, private_broker, own_keys, settings
):
    settings.FAIR_INFLIGHT_PER_TENANT = 2
    queue, runs, bells = _runs(tenant, 3)
    publisher = FirePublisher()
    try:
        publisher.submit(bells[:2])
        publisher.submit(bells[2:])
        assert publisher.drain() == 2
    finally:
        publisher.close()
    assert sorted(_rung_ids(redis_client, queue)) == sorted(b.execution_id for b in bells[:2])
    assert _statuses(runs) == ["queued", "queued", "pending"]
