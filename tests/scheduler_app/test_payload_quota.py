"""What a tenant may store of the payloads it supplies at run time (event payloads, trigger
parameters; `scheduler_app.services.payload_quota`), played through the API on real
PostgreSQL: each is size-capped (413 naming the field), a flood stops at the tenant's bytes
per rolling window (429 with Retry-After), a refused request stores nothing, other tenants
keep their own budget, and concurrent charges never squeeze past the quota together."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from dags.models import Dag, DagRun, Event
from scheduler_app.errors import TooLarge
from scheduler_app.models import BudgetUsage, TaskExecution
from scheduler_app.monitoring.counters import read_budget_refusals
from scheduler_app.services.payload_quota import (
    PayloadQuotaExceeded,
    payload_bytes_charge,
    payload_cap_check,
    payload_size,
)
from tests.api_clients import member_client
from tests.factories import make_task

KIB = 1024
NOOP = {"type": "python", "callable": "noop"}


@pytest.fixture
def budget(settings):
    def set_budget(*, cap: int = 256 * KIB, quota: int = 256 * KIB**2, window: int = 3600):
        settings.PAYLOADS = {
            "MAX_BYTES": cap,
            "TENANT_BYTES_PER_WINDOW": quota,
            "WINDOW_SECONDS": window,
        }

    set_budget()
    return set_budget


def _blob(size: int) -> dict:
    """A JSON object of exactly `size` bytes as compact JSON."""
    value = {"data": ""}
    value["data"] = "x" * (size - payload_size(value))
    assert payload_size(value) == size
    return value


def _used(tenant) -> int:
    usage = BudgetUsage.platform.filter(tenant=tenant, budget="payload_bytes")
    return sum(usage.values_list("amount", flat=True))


@pytest.mark.django_db
def test_payloads_and_parameters_over_the_cap_are_413_naming_the_field_and_store_nothing(
    api, tenant, budget
):
    budget(cap=100 * KIB)
    task = make_task(tenant, name="report", schedule={"type": "manual"})
    dag_id = api.post(
        "/api/v1/dags", {"dag": "pipeline", "tasks": [{"id": "a", "handler": NOOP}]}, format="json"
    ).json()["id"]
    over = _blob(100 * KIB + 1)
    for path, body, field in (
        ("/api/v1/events", {"name": "file.landed", "payload": over}, "payload"),
        (f"/api/v1/tasks/{task.id}/trigger", {"parameters": over}, "parameters"),
        (f"/api/v1/dags/{dag_id}/trigger", {"parameters": over}, "parameters"),
    ):
        response = api.post(path, body, format="json")
        assert response.status_code == 413, (path, response.content)
        assert response.json()["code"] == "payload_too_large"
        assert response.json()["field"] == field
        assert "102,401 bytes as JSON; at most 102,400" in response.json()["message"]
    assert not Event.platform.exists()
    assert not TaskExecution.platform.filter(task=task).exists()
    assert not DagRun.platform.filter(dag_id=dag_id).exists()
    assert _used(tenant) == 0
    assert read_budget_refusals()[(str(tenant.id), "payload_size")] == 3
    # At the cap exactly, each is taken (and counted).
    assert api.post("/api/v1/events", {"name": "x", "payload": _blob(100 * KIB)}, format="json")
    assert _used(tenant) == 100 * KIB
    # The whole body has its own cap before anything is parsed.
    assert (
        api.post("/api/v1/events", {"name": "x", "payload": _blob(1100 * KIB)}, format="json")
    ).status_code == 413


@pytest.mark.django_db
def test_an_event_flood_stops_at_the_tenants_quota_with_retry_after(
    api, tenant, tenant_factory, budget
):
    budget(quota=1000 * KIB)
    posted = [
        api.post("/api/v1/events", {"name": "flood", "payload": _blob(90 * KIB)}, format="json")
        for _ in range(14)
    ]
    statuses = [response.status_code for response in posted]
    assert statuses == [201] * 11 + [429] * 3  # 11 x 90 KiB fit in 1000 KiB, the 12th not
    refused = posted[-1]
    assert refused.json()["code"] == "payload_quota_exceeded"
    assert refused.json()["field"] == "payload"
    assert "in the last hour" in refused.json()["message"]
    # It fits again once the oldest slice has left the hour: within the hour, not before.
    assert 3500 <= int(refused["Retry-After"]) <= 3600
    assert Event.platform.filter(tenant=tenant).count() == 11  # the refused stored nothing
    assert _used(tenant) == 11 * 90 * KIB
    # The tenant sees it coming: what it spent and may spend.
    budget = api.get("/api/v1/tenant/usage").json()["budgets"]["payload_bytes"]
    assert budget == {
        "used": 11 * 90 * KIB,
        "limit": 1000 * KIB,
        "window_seconds": 3600,
        "max_bytes_each": 256 * KIB,
    }
    # Another tenant's quota is its own.
    other, _ = tenant_factory("globex")
    theirs, _ = member_client(other, "operator")
    answer = theirs.post("/api/v1/events", {"name": "x", "payload": _blob(90 * KIB)}, format="json")
    assert answer.status_code == 201
    # Triggers draw on the same budget.
    task = make_task(tenant, name="report", schedule={"type": "manual"})
    trigger = api.post(
        f"/api/v1/tasks/{task.id}/trigger", {"parameters": _blob(90 * KIB)}, format="json"
    )
    assert trigger.status_code == 429 and trigger.json()["field"] == "parameters"
    assert not TaskExecution.platform.filter(task=task).exists()
    # Without parameters there is nothing to store, and nothing to refuse.
    assert api.post(f"/api/v1/tasks/{task.id}/trigger", {}, format="json").status_code == 202


@pytest.mark.django_db
def test_an_event_counts_once_for_itself_and_once_for_each_run_it_starts(api, tenant, budget):
    for name in ("first", "second"):
        make_task(tenant, name=name, schedule={"type": "event", "name": "file.landed"})
    api.post(
        "/api/v1/dags",
        {
            "dag": "ingest",
            "schedule": {"type": "event", "name": "file.landed"},
            "tasks": [{"id": "a", "handler": NOOP}],
        },
        format="json",
    )
    event = {"name": "file.landed", "payload": _blob(10 * KIB)}
    response = api.post("/api/v1/events", event, format="json")
    assert response.status_code == 201 and len(response.json()["started"]) == 3
    assert _used(tenant) == 4 * 10 * KIB
    # What four copies do not fit in is refused whole: no event, no runs.
    budget(quota=60 * KIB)
    response = api.post("/api/v1/events", event, format="json")
    assert response.status_code == 429
    assert Event.platform.filter(tenant=tenant).count() == 1
    assert TaskExecution.platform.filter(task__name__in=["first", "second"]).count() == 2
    assert DagRun.platform.filter(dag__in=Dag.platform.filter(tenant=tenant)).count() == 1


@pytest.mark.django_db
def test_the_window_rolls_slice_by_slice(tenant, budget):
    budget(quota=100, window=3600)  # slices of a minute
    t0 = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
    with transaction.atomic():
        payload_bytes_charge(tenant_id=tenant.id, size=60, field="payload", now=t0)
    with transaction.atomic():
        payload_bytes_charge(
            tenant_id=tenant.id, size=40, field="payload", now=t0 + timedelta(minutes=30)
        )
    with pytest.raises(PayloadQuotaExceeded) as refused, transaction.atomic():
        payload_bytes_charge(
            tenant_id=tenant.id, size=1, field="payload", now=t0 + timedelta(minutes=50)
        )
    # The 60 bytes of 12:00 leave the window at 13:00: ten minutes after 12:50.
    assert refused.value.retry_after == 10 * 60 - 30
    assert _used(tenant) == 100  # the refused charge rolled back with its transaction
    with transaction.atomic():
        payload_bytes_charge(
            tenant_id=tenant.id, size=60, field="payload", now=t0 + timedelta(minutes=60)
        )
    # The slice that left the window was deleted when a new slice began.
    assert _used(tenant) == 100
    with pytest.raises(TooLarge):
        payload_cap_check(tenant_id=tenant.id, value=_blob(256 * KIB + 1), field="parameters")


@pytest.mark.django_db(transaction=True)
def test_concurrent_charges_of_one_tenant_never_pass_the_quota_together(tenant, budget):
    budget(quota=1000)
    start, taken, refused = threading.Barrier(10), [], []

    def charge() -> None:
        try:
            start.wait()
            with transaction.atomic():
                payload_bytes_charge(tenant_id=tenant.id, size=300, field="payload")
            taken.append(1)
        except PayloadQuotaExceeded:
            refused.append(1)
        finally:
            connection.close()

    threads = [threading.Thread(target=charge) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert (len(taken), len(refused)) == (3, 7)
    assert _used(tenant) == 900
