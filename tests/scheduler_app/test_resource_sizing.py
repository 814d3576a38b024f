"""Runs sized from what they used: p50/p95 of CPU and peak memory over a task's recent runs,
the suggested resource_requirements (p95 x 1.3, rounded up), and the bulk-tier tasks whose
runs use a tenth or less of what they ask, through the API and the dashboard, tenant-scoped
(platform staff see every tenant)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.selectors.resource_usage import resources_suggest
from tests.api_clients import PASSWORD, member_client, staff_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db
MIB = 1024**2
ASKING = {"memory": "4Gi", "cpu_seconds": 100}


def _shell_task(tenant, name, *, priority=9, requirements=ASKING):
    handler = {"type": "shell", "command": ["true"]}
    if requirements:
        handler["resource_requirements"] = requirements
    return make_task(
        tenant, name=name, schedule={"type": "manual"}, handler=handler, priority=priority
    )


def _measured_runs(task, *, cpu_step=0.1, memory_step=10 * MIB, count=10):
    """`count` finished runs using cpu_step * i seconds and memory_step * i bytes, i = 1..count,
    and an older run without a usage (an http-like run), which the figures leave out."""
    now = timezone.now()
    rows = [
        TaskExecution(
            id=uuid.uuid4(),
            tenant_id=task.tenant_id,
            task=task,
            status="success",
            scheduled_at=now - timedelta(minutes=index),
            started_at=now - timedelta(minutes=index),
            completed_at=now - timedelta(minutes=index) + timedelta(seconds=1),
            cpu_seconds=cpu_step * index,
            peak_memory_bytes=memory_step * index,
        )
        for index in range(1, count + 1)
    ]
    rows.append(
        TaskExecution(
            id=uuid.uuid4(),
            tenant_id=task.tenant_id,
            task=task,
            status="success",
            scheduled_at=now - timedelta(hours=2),
        )
    )
    TaskExecution.objects.bulk_create(rows)


def test_the_suggestion_is_p95_with_headroom_rounded_up():
    assert resources_suggest(runs=10, cpu_p95=0.955, memory_p95=95.5 * MIB) == {
        "cpu_seconds": 2,  # 0.955 x 1.3 = 1.24 -> 2
        "memory": "125Mi",  # 95.5 MiB x 1.3 = 124.15 -> 125
    }
    assert resources_suggest(runs=10, cpu_p95=0.01, memory_p95=1000) == {
        "cpu_seconds": 1,
        "memory": "1Mi",
    }
    assert resources_suggest(runs=4, cpu_p95=1.0, memory_p95=MIB) is None  # too few runs


def test_the_task_usage_and_stats_show_the_quantiles_and_the_suggestion(tenant, api):
    task = _shell_task(tenant, "measured")
    _measured_runs(task)

    response = api.get(f"/api/v1/tasks/{task.id}/resource-usage")
    assert response.status_code == 200, response.content
    usage = response.json()
    assert usage["runs"] == 10
    assert usage["cpu_seconds"] == {"p50": pytest.approx(0.55), "p95": pytest.approx(0.955)}
    assert usage["peak_memory_bytes"]["p50"] == pytest.approx(55 * MIB)
    assert usage["peak_memory_bytes"]["p95"] == pytest.approx(95.5 * MIB)
    assert usage["requested"] == {"cpu_seconds": 100, "memory_bytes": 4 * 1024**3}
    assert usage["suggested_resource_requirements"] == {"cpu_seconds": 2, "memory": "125Mi"}

    stats = api.get(f"/api/v1/tasks/{task.id}/stats", {"window": "1d"})
    assert stats.status_code == 200, stats.content
    assert stats.json()["resources"] == usage


def test_another_tenants_task_usage_is_a_404(tenant, tenant_factory):
    other, _ = tenant_factory("victim")
    hidden = _shell_task(other, "hidden")
    _measured_runs(hidden)
    intruder, _ = member_client(tenant, "viewer")
    for path in (f"/api/v1/tasks/{hidden.id}/resource-usage", f"/api/v1/tasks/{hidden.id}/stats"):
        response = intruder.get(path)
        assert response.status_code == 404, path
        assert "p95" not in response.content.decode()


def test_bulk_tasks_using_a_tenth_of_their_ask_are_listed_for_their_tenant_only(
    tenant, tenant_factory, api
):
    wasteful = _shell_task(tenant, "wasteful-bulk")
    _measured_runs(wasteful)
    normal_tier = _shell_task(tenant, "wasteful-normal", priority=5)
    _measured_runs(normal_tier)
    # Asks 2 s of CPU and 256 MiB, uses about half: not over-provisioned.
    fitting = _shell_task(
        tenant, "fitting-bulk", requirements={"memory": "256Mi", "cpu_seconds": 2}
    )
    _measured_runs(fitting)
    unasked = _shell_task(tenant, "asks-nothing", requirements=None)
    _measured_runs(unasked)
    other, _ = tenant_factory("neighbour")
    elsewhere = _shell_task(other, "their-wasteful-bulk")
    _measured_runs(elsewhere)

    response = api.get("/api/v1/sizing/overprovisioned")
    assert response.status_code == 200, response.content
    (listed,) = response.json()
    assert listed["task_id"] == str(wasteful.id) and listed["tenant"] == tenant.slug
    assert listed["used_share"] == {
        "cpu_seconds": pytest.approx(0.955 / 100, abs=1e-4),
        "memory_bytes": pytest.approx(95.5 * MIB / (4 * 1024**3), abs=1e-4),
    }
    assert listed["usage"]["suggested_resource_requirements"] == {
        "cpu_seconds": 2,
        "memory": "125Mi",
    }

    everyone = staff_client().get("/api/v1/sizing/overprovisioned").json()
    assert {row["task_name"] for row in everyone} == {"wasteful-bulk", "their-wasteful-bulk"}

    page = Client()
    assert page.login(username=_admin_of(tenant), password=PASSWORD)
    html = page.get("/dashboard/sizing").content.decode()
    assert "wasteful-bulk" in html and "their-wasteful-bulk" not in html
    assert "fitting-bulk" not in html and "wasteful-normal" not in html
    task_page = page.get(f"/dashboard/tasks/{wasteful.id}").content.decode()
    assert 'id="resources-suggested"' in task_page and '"memory": "125Mi"' in task_page


def _admin_of(tenant) -> str:
    return tenant.memberships.select_related("user").first().user.username
