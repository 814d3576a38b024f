"""A run over the concurrency quota waits seconds behind long runs, but only a moment
behind runs other workers claimed moments ago (their batches: claimed together, run a few
at a time, counted as running meanwhile). Real PostgreSQL rows, counted by the claim's own
statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.quotas import quota_decide_counts, quota_running_count
from tests.factories import make_task


def _running(task, count: int, *, claimed_ago: float) -> None:
    now = timezone.now()
    TaskExecution.platform.bulk_create(
        TaskExecution(
            tenant_id=task.tenant_id,
            task=task,
            status="running",
            trigger="manual",
            scheduled_at=now - timedelta(seconds=60, microseconds=index),
            started_at=now - timedelta(seconds=claimed_ago),
            worker_id="other-worker",
        )
        for index in range(count)
    )


def _deferral(tenant, *, now):
    counted = quota_running_count(tenant_id=tenant.id, now=now)
    # One run of this claim's batch, the others of the tenant as the count found them.
    return quota_decide_counts(
        tenant=tenant,
        running=counted.total + 1,
        runs_after=1,
        seconds=0,
        now=now,
        settled=counted.settled,
    )


@pytest.mark.django_db
def test_behind_runs_claimed_moments_ago_a_run_is_looked_at_again_soon(tenant, settings):
    settings.QUOTA_DEFER_SECONDS, settings.QUOTA_RECHECK_SECONDS = 5.0, 0.5
    tenant.max_concurrent_runs = 3
    tenant.save(update_fields=["max_concurrent_runs"])
    _running(make_task(tenant), 3, claimed_ago=0.1)
    now = timezone.now()
    counted = quota_running_count(tenant_id=tenant.id, now=now)
    assert (counted.total, counted.settled) == (3, 0)
    deferral = _deferral(tenant, now=now)
    assert deferral is not None and deferral.quota == "max_concurrent_runs"
    assert timedelta(seconds=0.25) <= deferral.until - now <= timedelta(seconds=0.75)


@pytest.mark.django_db
def test_behind_runs_in_progress_for_a_while_a_run_waits_the_full_deferral(tenant, settings):
    settings.QUOTA_DEFER_SECONDS, settings.QUOTA_RECHECK_SECONDS = 5.0, 0.5
    tenant.max_concurrent_runs = 3
    tenant.save(update_fields=["max_concurrent_runs"])
    task = make_task(tenant)
    _running(task, 3, claimed_ago=30)  # the limit is held by runs well under way
    _running(task, 2, claimed_ago=0.1)
    now = timezone.now()
    counted = quota_running_count(tenant_id=tenant.id, now=now)
    assert (counted.total, counted.settled) == (5, 3)
    deferral = _deferral(tenant, now=now)
    assert deferral is not None
    assert timedelta(seconds=2.5) <= deferral.until - now <= timedelta(seconds=7.5)


@pytest.mark.django_db
def test_under_the_limit_nothing_is_deferred_however_fresh(tenant, settings):
    tenant.max_concurrent_runs = 3
    tenant.save(update_fields=["max_concurrent_runs"])
    _running(make_task(tenant), 2, claimed_ago=0.1)
    assert _deferral(tenant, now=timezone.now()) is None
