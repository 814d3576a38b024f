"""Executions list (filters, cursor, ordering), retry, idempotency, metrics, audit, usage,
rate limit and bad input."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.finish import run_finish
from scheduler_app.models import AuditEntry, TaskDefinition, TaskExecution
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _finish(execution, status: str, *, transient: bool = False):
    claim = execution_claim(execution_id=execution.id, worker_id="w", lease_seconds=30)
    run_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status=status, transient=transient),
    )


@pytest.fixture
def runs(tenant):
    etl = make_task(tenant, name="etl", schedule={"type": "manual"}, tags=["etl"])
    web = make_task(tenant, name="web", schedule={"type": "manual"}, tags=["web"])
    made = []
    for index in range(5):
        execution = task_trigger(task=etl)
        _finish(execution, "success" if index % 2 == 0 else "failed")
        made.append(execution)
    made.append(task_trigger(task=web))
    return etl, web, made


def test_list_filters_by_status_task_tag_and_time(api, runs):
    _etl, web, _made = runs
    everything = api.get("/api/v1/executions").json()["results"]
    assert len(everything) == 6
    assert {
        row["status"] for row in api.get("/api/v1/executions?status=failed").json()["results"]
    } == {"failed"}
    both = api.get("/api/v1/executions?status=failed,success").json()["results"]
    assert len(both) == 5
    assert {
        row["task_id"] for row in api.get(f"/api/v1/executions?task={web.id}").json()["results"]
    } == {str(web.id)}
    assert len(api.get("/api/v1/executions?tag=etl").json()["results"]) == 5
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    assert api.get("/api/v1/executions", {"since": future}).json()["results"] == []
    assert len(api.get("/api/v1/executions", {"until": future}).json()["results"]) == 6


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=bogus", "status"),
        ("task=not-a-uuid", "task"),
        ("since=yesterday", "since"),
        ("until=2026-01-01T00:00:00", "until"),
        ("ordering=secret", "ordering"),
    ],
)
def test_bad_filters_are_400_naming_the_field(api, runs, query, field):
    response = api.get(f"/api/v1/executions?{query}")
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_cursor_pagination_walks_every_row_once_in_order(api, runs):
    seen, url = [], "/api/v1/executions?page_size=2&ordering=scheduled_at"
    while url:
        body = api.get(url).json()
        seen.extend(row["id"] for row in body["results"])
        url = body["next"]
    assert len(seen) == len(set(seen)) == 6
    times = [TaskExecution.platform.get(id=id_).scheduled_at for id_ in seen]
    assert times == sorted(times)


def test_tasks_list_ordering(api, runs):
    names = [row["name"] for row in api.get("/api/v1/tasks?ordering=-name").json()["results"]]
    assert names == ["web", "etl"]
    assert api.get("/api/v1/tasks?ordering=password").json()["field"] == "ordering"


def test_retry_a_failed_execution_once(api, runs):
    _, _, made = runs
    failed = made[1]
    first = api.post(f"/api/v1/executions/{failed.id}/retry")
    assert first.status_code == 202, first.content
    retry = TaskExecution.platform.get(id=first.json()["execution_id"])
    assert retry.retry_of_id == failed.id and retry.attempt == 1 and retry.trigger == "retry"
    assert api.post(f"/api/v1/executions/{failed.id}/retry").status_code == 409
    assert api.post(f"/api/v1/executions/{made[0].id}/retry").status_code == 409  # a success


def test_idempotency_key_makes_create_and_trigger_act_once(api, tenant):
    spec = {
        "name": "once",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
    }
    first = api.post("/api/v1/tasks", spec, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/v1/tasks", spec, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert TaskDefinition.platform.filter(tenant=tenant, name="once").count() == 1
    task_id = first.json()["id"]
    fired = [
        api.post(f"/api/v1/tasks/{task_id}/trigger", {}, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
        for _ in range(3)
    ]
    assert len({response.json()["execution_id"] for response in fired}) == 1
    assert TaskExecution.platform.filter(task_id=task_id).count() == 1
    other = api.post(
        f"/api/v1/tasks/{task_id}/trigger", {}, format="json", HTTP_IDEMPOTENCY_KEY="t-2"
    )
    assert other.json()["execution_id"] != fired[0].json()["execution_id"]


def test_metrics_count_by_status_with_success_rate_and_queue_depth(api, runs):
    body = api.get("/api/v1/admin/metrics").json()
    assert body["counts_by_status"]["success"] == 3
    assert body["counts_by_status"]["failed"] == 2
    assert body["success_rate"] == 0.6
    assert body["queue_depth"]["total"] == 1


def test_writes_are_audited_with_actor_action_and_object(api, runs):
    etl, _, _ = runs
    api.post(f"/api/v1/tasks/{etl.id}/pause")
    entry = AuditEntry.platform.filter(action="task.pause").get()
    assert entry.actor == "user:acme-admin" and entry.object_id == str(etl.id)
    assert (entry.detail["before"], entry.detail["after"]) == ({"paused": False}, {"paused": True})
    listed = api.get("/api/v1/audit?verb=task.pause").json()["results"]
    assert [row["object_id"] for row in listed] == [str(etl.id)]


def test_usage_reports_usage_and_quota(api, tenant):
    body = api.get("/api/v1/tenant/usage").json()
    assert body["quota"] == {
        "max_concurrent_runs": 100,
        "max_runs_per_hour": 10000,
        "max_compute_minutes_per_month": 50000,
        "max_log_bytes": 100 * 1024**3,
    }
    assert body["usage"]["concurrent_runs"] == 0
    assert body["usage"]["log_bytes"] == 0
    assert body["rate_limit_per_minute"] == 1000


def test_rate_limit_answers_429_with_retry_after(api, tenant):
    tenant.rate_limit_per_minute = 3
    tenant.save(update_fields=["rate_limit_per_minute"])
    # 7 calls cannot fit in two windows of 3, even if the minute rolls over meanwhile.
    codes = [api.get("/api/v1/tasks").status_code for _ in range(7)]
    assert codes.count(429) >= 1
    limited = api.get("/api/v1/tasks")
    if limited.status_code == 429:
        assert 1 <= int(limited["Retry-After"]) <= 60
        assert limited.json()["code"] == "throttled"


def test_body_over_one_mebibyte_is_413_and_saves_nothing(api, tenant):
    spec = {
        "name": "big",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
        "description": "x" * (1024 * 1024 + 10),
    }
    response = api.post("/api/v1/tasks", json.dumps(spec), content_type="application/json")
    assert response.status_code == 413
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()


def test_malformed_json_is_400(api, tenant):
    response = api.post("/api/v1/tasks", '{"name": ', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_wrong_types_are_400_naming_the_field_and_save_nothing(api, tenant):
    spec = {
        "name": "typed",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
    }
    response = api.post("/api/v1/tasks", {**spec, "priority": "high"}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "priority"
    response = api.post("/api/v1/tasks", {**spec, "tags": "etl"}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "tags"
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()


def test_promote_is_fair_a_backlog_does_not_starve_another_tenants_due_row(tenant_factory):
    from django.test import override_settings

    from scheduler_app.services.firing import due_pending_promote

    noisy, _ = tenant_factory("noisy")
    quiet, _ = tenant_factory("quiet")
    flood_task = make_task(noisy, name="flood", schedule={"type": "manual"})
    quiet_task = make_task(quiet, name="single", schedule={"type": "manual"})
    now = timezone.now()
    for index in range(30):
        TaskExecution.objects.create(
            tenant=noisy,
            task=flood_task,
            status="pending",
            scheduled_at=now - timedelta(minutes=10, seconds=index),
        )
    mine = TaskExecution.objects.create(
        tenant=quiet, task=quiet_task, status="pending", scheduled_at=now - timedelta(seconds=1)
    )
    with override_settings(FAIR_INFLIGHT_PER_TENANT=5):
        bells = due_pending_promote(now=now, limit=10)
    promoted = {bell.execution_id for bell in bells}
    assert str(mine.id) in promoted
    assert sum(bell.tenant_id == str(noisy.id) for bell in bells) == 5
