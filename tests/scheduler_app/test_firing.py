"""The leader's batched writes: one row per fire, only inserted rows are published."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.firing import (
    Fire,
    due_pending_promote,
    fires_record,
    next_fires_save,
    stale_queued_requeue,
)
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def fire_for(task, at):
    return Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=at,
        priority=task.priority,
        queue="normal",
        max_attempts=task.max_attempts,
    )


def test_a_fire_recorded_twice_is_inserted_and_published_once(tenant):
    task = make_task(tenant)
    at = timezone.now().replace(microsecond=0)
    first = fires_record([fire_for(task, at)], now=timezone.now())
    second = fires_record(
        [fire_for(task, at), fire_for(task, at + timedelta(minutes=1))], now=timezone.now()
    )
    assert len(first) == 1 and len(second) == 1
    assert TaskExecution.platform.filter(task=task).count() == 2
    row = TaskExecution.platform.get(id=first[0].execution_id)
    assert row.status == "queued" and row.trigger == "schedule" and row.root_execution_id == row.id
    assert first[0].tenant_id == str(tenant.id) and first[0].queue == "normal"


def test_a_batch_of_thousands_is_one_round_trip(tenant, django_assert_max_num_queries):
    tasks = [make_task(tenant, name=f"t{i}") for i in range(50)]
    at = timezone.now().replace(microsecond=0)
    fires = [fire_for(task, at + timedelta(seconds=s)) for task in tasks for s in range(40)]
    with django_assert_max_num_queries(3):
        bells = fires_record(fires, now=timezone.now())
    assert len(bells) == 2000


def test_due_pending_rows_are_promoted_once(tenant):
    task = make_task(tenant)
    now = timezone.now()
    due = TaskExecution.objects.create(tenant=tenant, task=task, status="pending", scheduled_at=now)
    TaskExecution.objects.create(
        tenant=tenant, task=task, status="pending", scheduled_at=now + timedelta(hours=1)
    )
    bells = due_pending_promote(now=now + timedelta(seconds=1), limit=100)
    assert [b.execution_id for b in bells] == [str(due.id)]
    assert due_pending_promote(now=now + timedelta(seconds=1), limit=100) == []
    due.refresh_from_db()
    assert due.status == "queued" and due.queued_at is not None


def test_queued_rows_nobody_started_are_republished_after_the_grace(tenant):
    task = make_task(tenant)
    now = timezone.now()
    stuck = TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="queued",
        scheduled_at=now - timedelta(minutes=10),
        queued_at=now - timedelta(minutes=10),
    )
    TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="queued",
        scheduled_at=now,
        queued_at=now,
    )
    bells = stale_queued_requeue(now=now, grace_seconds=60, limit=100)
    assert [b.execution_id for b in bells] == [str(stuck.id)]
    stuck.refresh_from_db()
    assert stuck.queued_at >= now


def test_next_fire_positions_are_saved_in_one_batch(tenant):
    tasks = [make_task(tenant, name=f"t{i}") for i in range(3)]
    at = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    next_fires_save([(task.id, at, at - timedelta(hours=1)) for task in tasks])
    for task in tasks:
        task.refresh_from_db()
        assert task.next_fire_at == at and task.last_fired_at == at - timedelta(hours=1)


def test_a_new_leader_rings_again_what_its_predecessor_recorded_last(tenant):
    from scheduler_app.services.firing import takeover_queued_republish

    task = make_task(tenant)
    now = timezone.now()
    recent = TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="queued",
        scheduled_at=now,
        queued_at=now - timedelta(seconds=2),
    )
    TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="queued",
        scheduled_at=now - timedelta(hours=1),
        queued_at=now - timedelta(hours=1),
    )
    TaskExecution.objects.create(
        tenant=tenant, task=task, status="running", scheduled_at=now - timedelta(seconds=1)
    )
    bells = takeover_queued_republish(since=now - timedelta(seconds=10), now=now, limit=100)
    assert [bell.execution_id for bell in bells] == [str(recent.id)]
    assert takeover_queued_republish(since=now - timedelta(seconds=10), now=now, limit=100) == []
