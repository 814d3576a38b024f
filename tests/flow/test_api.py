"""Flow control through the API, as a tenant and as an attacker: pools (CRUD, audited, resized,
another tenant's pool unknown), a task's limits (bad input is a 400 naming the field and
saves nothing; a key cannot read secrets), and `waiting_for` on the runs."""

from __future__ import annotations

import pytest

from scheduler_app.models import AuditEntry, TaskDefinition
from scheduler_app.services.pools import pool_create
from scheduler_app.services.secrets import secret_create
from tests.flow.helpers import claim_and_admit, queued

pytestmark = pytest.mark.django_db
C = "concurrency[0]"


def task_body(**flow):
    return {
        "name": "sync",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "noop"},
        **flow,
    }


def test_pools_are_created_listed_resized_and_deleted_and_each_write_is_audited(api, tenant):
    created = api.post("/api/v1/pools", {"name": "warehouse", "slots": 5}, format="json")
    assert created.status_code == 201, created.content
    assert created.json() == {
        **created.json(),
        "name": "warehouse",
        "slots": 5,
        "running": 0,
        "waiting": 0,
    }
    assert api.get("/api/v1/pools").json()["results"][0]["name"] == "warehouse"
    resized = api.patch("/api/v1/pools/warehouse", {"slots": 2}, format="json")
    assert resized.status_code == 200 and resized.json()["slots"] == 2
    assert api.get("/api/v1/pools/warehouse").json()["slots"] == 2
    assert api.delete("/api/v1/pools/warehouse").status_code == 204
    assert api.get("/api/v1/pools/warehouse").status_code == 404
    verbs = set(AuditEntry.platform.filter(tenant=tenant).values_list("action", flat=True))
    assert {"pool.create", "pool.update", "pool.delete"} <= verbs


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "w", "slots": 0}, "slots"),
        ({"name": "w", "slots": -1}, "slots"),
        ({"name": "no spaces", "slots": 1}, "name"),
        ({"name": "w"}, "slots"),
    ],
)
def test_a_bad_pool_is_a_400_naming_the_field(api, body, field):
    response = api.post("/api/v1/pools", body, format="json")
    assert response.status_code == 400
    assert field in response.content.decode()
    assert api.get("/api/v1/pools").json()["results"] == []


def test_another_tenants_pool_is_unknown(api, tenant_factory):
    other, _ = tenant_factory("bravo")
    pool_create(tenant=other, name="their-pool", slots=9)
    assert api.get("/api/v1/pools/their-pool").status_code == 404
    assert api.patch("/api/v1/pools/their-pool", {"slots": 100}, format="json").status_code == 404
    assert api.delete("/api/v1/pools/their-pool").status_code == 404
    # A task naming it is refused as for a pool that does not exist, and nothing is saved.
    response = api.post("/api/v1/tasks", task_body(pool="their-pool"), format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "pool"
    assert not TaskDefinition.platform.filter(name="sync").exists()
    assert api.get("/api/v1/pools").json()["results"] == []


@pytest.mark.parametrize(
    ("flow", "field"),
    [
        ({"concurrency": [{"key": "{{ customer }}", "max_running": 1}]}, "concurrency[0].key"),
        ({"concurrency": [{"key": "k", "max_running": 0}]}, "concurrency[0].max_running"),
        ({"concurrency": [{"key": "k", "max_running": 1, "strategy": "x"}]}, C + ".strategy"),
        ({"rate_limit": [{"key": "k", "limit": -5}]}, "rate_limit[0].limit"),
        ({"pool": "nowhere"}, "pool"),
        ({"concurrency": [{"key": "{{secret:stripe_key}}", "max_running": 1}]}, C + ".key"),
    ],
)  # fmt: skip
def test_bad_flow_control_is_a_400_naming_the_field_and_saves_nothing(api, flow, field):
    response = api.post("/api/v1/tasks", task_body(**flow), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not TaskDefinition.platform.filter(name="sync").exists()


def test_a_task_reads_back_its_limits(api, tenant):
    pool_create(tenant=tenant, name="warehouse", slots=5)
    flow = {
        "concurrency": [{"key": "{{ parameters.customer_id }}", "max_running": 2}],
        "pool": "warehouse",
        "pool_slots": 2,
        "rate_limit": [{"key": "stripe", "limit": 10, "per": "second"}],
    }
    response = api.post("/api/v1/tasks", task_body(**flow), format="json")
    assert response.status_code == 201, response.content
    body = api.get(f"/api/v1/tasks/{response.json()['id']}").json()
    assert body["concurrency"] == [
        {"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": "queue"}
    ]
    assert (body["pool"], body["pool_slots"]) == ("warehouse", 2)
    assert body["rate_limit"] == flow["rate_limit"]
    cleared = api.patch(f"/api/v1/tasks/{body['id']}", {"pool": None}, format="json")
    assert cleared.json()["pool"] is None


def test_a_key_never_shows_a_secret_the_run_was_given(api, tenant):
    """The attacker names a secret in a parameter the key renders: the key (and what the
    API shows of a waiting run) holds neither the secret's value nor its reference."""
    secret_create(tenant=tenant, name="stripe_key", value="sk_live_TOPSECRET")
    task = TaskDefinition.platform.get(
        id=api.post(
            "/api/v1/tasks",
            task_body(concurrency=[{"key": "acct-{{ parameters.account }}", "max_running": 1}]),
            format="json",
        ).json()["id"]
    )
    runs = queued(task, 2, account="{{secret:stripe_key}}")
    claim_and_admit(runs)
    response = api.get(f"/api/v1/executions/{runs[1].id}")
    assert response.json()["waiting_for"]["key"] == "acct-[secret]"
    assert "TOPSECRET" not in response.content.decode()


def test_waiting_for_is_shown_in_the_execution_list_and_detail(api, tenant):
    task = TaskDefinition.platform.get(
        id=api.post(
            "/api/v1/tasks",
            task_body(concurrency=[{"key": "{{ parameters.c }}", "max_running": 1}]),
            format="json",
        ).json()["id"]
    )
    runs = queued(task, 2, c="customer-42")
    claim_and_admit(runs)
    expected = {"kind": "concurrency", "key": "customer-42", "running": 1, "max": 1}
    assert api.get(f"/api/v1/executions/{runs[1].id}").json()["waiting_for"] == expected
    assert api.get(f"/api/v1/executions/{runs[0].id}").json()["waiting_for"] is None
    listed = {
        row["id"]: row["waiting_for"] for row in api.get("/api/v1/executions").json()["results"]
    }
    assert listed[str(runs[1].id)] == expected


def test_a_metric_per_limit_with_running_and_waiting_and_bounded_keys(api, tenant, monkeypatch):
    from scheduler_app.monitoring import flow

    task = TaskDefinition.platform.get(
        id=api.post(
            "/api/v1/tasks",
            task_body(concurrency=[{"key": "{{ parameters.c }}", "max_running": 1}]),
            format="json",
        ).json()["id"]
    )
    for customer in ("a", "b", "c"):
        claim_and_admit(queued(task, 2, c=customer))
    monkeypatch.setattr(flow, "FLOW_METRIC_KEYS", 2)
    families = {family.name: family for family in flow.flow_metrics({str(tenant.id): "acme"})}
    running = {s.labels["key"]: s.value for s in families["scheduler_flow_running"].samples}
    waiting = {s.labels["key"]: s.value for s in families["scheduler_flow_waiting"].samples}
    assert sum(running.values()) == 3 and sum(waiting.values()) == 3
    assert len(set(running) | set(waiting)) <= 3  # two keys and "_other"
    assert "_other" in set(running) | set(waiting)
