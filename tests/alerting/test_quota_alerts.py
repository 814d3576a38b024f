"""A breached quota is told to the tenant's alert channels once per quota and hour, and
resolves when it clears."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.models import AlertIncident
from alerting.rules import alerts_evaluate
from alerting.services.channels import notification_channel_create
from alerting.tasks import enqueue_incident_changes
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.redis_client import get_redis
from scheduler_app.services.quotas import usage_counter_keys
from tests.alerting.test_notifications import drain
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _quota(changes):
    return [
        (i.key.split(":", 1)[1], resolved) for i, resolved in changes if i.rule == "quota_breached"
    ]


def _running(task, n):
    now = timezone.now()
    return [
        TaskExecution.objects.create(
            tenant=task.tenant, task=task, status="running", scheduled_at=now - timedelta(seconds=i)
        )
        for i in range(n)
    ]


def test_concurrency_at_its_limit_is_told_once_and_resolves(
    tenant, tenant_factory, receiver, notify_settings
):
    notification_channel_create(
        tenant=tenant, name="admins", kind="webhook", target=receiver.url + "/admins"
    )
    Tenant.objects.filter(id=tenant.id).update(max_concurrent_runs=2)
    other, _ = tenant_factory("globex")  # under its quotas: nothing for it
    task = make_task(tenant)
    runs = _running(task, 2)
    _running(make_task(other), 1)

    changes = alerts_evaluate()
    assert _quota(changes) == [("max_concurrent_runs", False)]
    assert _quota(alerts_evaluate()) == []  # still at it: nobody told twice
    enqueue_incident_changes(changes)
    drain(notify_settings)
    (told,) = [b for b in receiver.bodies("/admins") if b["rule"] == "quota_breached"]
    assert "max_concurrent_runs" in told["text"] and "2 of 2" in told["text"]
    incident = AlertIncident.platform.get(rule="quota_breached")
    assert incident.tenant_id == tenant.id

    TaskExecution.platform.filter(id=runs[0].id).update(status="success")
    changes = alerts_evaluate()
    assert _quota(changes) == [("max_concurrent_runs", True)]
    enqueue_incident_changes(changes)
    drain(notify_settings)
    assert [b["event"] for b in receiver.bodies("/admins") if b["rule"] == "quota_breached"] == [
        "alert",
        "alert_resolved",
    ]

    # Breached again within the hour: quiet. An hour after the last one: told again.
    TaskExecution.platform.filter(id=runs[0].id).update(status="running")
    assert _quota(alerts_evaluate()) == []
    AlertIncident.platform.filter(rule="quota_breached").update(
        opened_at=timezone.now() - timedelta(hours=1, minutes=1)
    )
    assert _quota(alerts_evaluate()) == [("max_concurrent_runs", False)]


def test_hourly_and_monthly_quotas_from_the_usage_counters(tenant):
    Tenant.objects.filter(id=tenant.id).update(
        max_runs_per_hour=10, max_compute_minutes_per_month=5
    )
    runs_key, seconds_key = usage_counter_keys(tenant_id=tenant.id, now=timezone.now())
    get_redis().set(runs_key, 9)
    get_redis().set(seconds_key, 60 * 4.5)
    assert _quota(alerts_evaluate()) == []
    get_redis().set(runs_key, 10)
    get_redis().set(seconds_key, 60 * 5)
    assert sorted(_quota(alerts_evaluate())) == [
        ("max_compute_minutes_per_month", False),
        ("max_runs_per_hour", False),
    ]
