"""The DAG API: validation answers 400 naming the problem, tenants are walls, sync_dags."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from dags.models import Dag, DagRun

pytestmark = pytest.mark.django_db

H = {"type": "python", "callable": "noop"}


def definition(name="pipeline", **extra):
    return {
        "dag": name,
        "tasks": [
            {"id": "extract-a", "handler": H},
            {"id": "extract-b", "handler": H},
            {"id": "merge", "handler": H, "depends_on": ["extract-a", "extract-b"]},
        ],
        **extra,
    }


def test_create_get_update_delete(api):
    created = api.post("/api/v1/dags", definition(), format="json")
    assert created.status_code == 201, created.content
    dag_id = created.json()["id"]
    assert created.json()["version"] == 1
    got = api.get(f"/api/v1/dags/{dag_id}").json()
    assert [t["id"] for t in got["definition"]["tasks"]] == ["extract-a", "extract-b", "merge"]
    updated = api.put(
        f"/api/v1/dags/{dag_id}", definition(failure_policy="continue"), format="json"
    )
    assert updated.status_code == 200 and updated.json()["version"] == 2
    assert api.get("/api/v1/dags").json()["count"] == 1
    assert api.delete(f"/api/v1/dags/{dag_id}").status_code == 204
    assert api.get(f"/api/v1/dags/{dag_id}").status_code == 404


def test_a_cycle_is_a_400_that_names_it_and_saves_nothing(api):
    raw = {
        "dag": "loop",
        "tasks": [
            {"id": "a", "handler": H, "depends_on": ["c"]},
            {"id": "b", "handler": H, "depends_on": ["a"]},
            {"id": "c", "handler": H, "depends_on": ["b"]},
        ],
    }
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    assert "a -> b -> c -> a" in response.json()["message"]
    assert not Dag.platform.exists()


def test_a_bad_node_handler_is_a_400_naming_the_node(api):
    raw = {"dag": "x", "tasks": [{"id": "a", "handler": {"type": "python", "callable": "nope"}}]}
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    assert response.json()["field"].startswith("tasks[0].handler")
    assert not Dag.platform.exists()


def test_another_tenants_dag_is_not_found(api, tenant_factory):
    dag_id = api.post("/api/v1/dags", definition(), format="json").json()["id"]
    _, stranger = tenant_factory("other")
    client = APIClient()
    token = client.post(
        "/api/v1/auth/token",
        {"username": stranger.username, "password": "pw-123456"},
        format="json",
    ).json()["access"]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get(f"/api/v1/dags/{dag_id}").status_code == 404
    assert client.post(f"/api/v1/dags/{dag_id}/trigger").status_code == 404
    assert client.get(f"/api/v1/dags/{dag_id}/executions").status_code == 404


def test_trigger_creates_a_run_with_every_node(api, django_capture_on_commit_callbacks):
    dag_id = api.post("/api/v1/dags", definition(max_active_runs=1), format="json").json()["id"]
    with django_capture_on_commit_callbacks(execute=False):
        first = api.post(f"/api/v1/dags/{dag_id}/trigger", {}, format="json")
        second = api.post(f"/api/v1/dags/{dag_id}/trigger", {}, format="json")
    assert first.status_code == 202 and first.json()["status"] == "running"
    assert second.json()["status"] == "queued"  # max_active_runs=1
    detail = api.get(f"/api/v1/dags/{dag_id}/executions/{first.json()['id']}").json()
    states = {n["node_id"]: n["status"] for n in detail["nodes"]}
    assert states == {"extract-a": "queued", "extract-b": "queued", "merge": "waiting"}
    assert api.get(f"/api/v1/dags/{dag_id}/executions").json()["count"] == 2
    cancelled = api.post(f"/api/v1/dags/{dag_id}/executions/{first.json()['id']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    assert {n["status"] for n in cancelled.json()["nodes"]} == {"cancelled"}
    # The slot freed: the queued run started.
    assert DagRun.platform.get(id=second.json()["id"]).status == "running"


def test_sync_dags_creates_versions_and_keeps_the_old_one_on_error(tenant, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**definition(), "tenant": tenant.slug}))
    call_command("sync_dags", dir=str(tmp_path), stdout=io.StringIO())
    dag = Dag.platform.get(name="pipeline")
    assert dag.version == 1
    broken = definition()
    broken["tasks"][0]["depends_on"] = ["merge"]
    (tmp_path / "p.json").write_text(json.dumps({**broken, "tenant": tenant.slug}))
    err = io.StringIO()
    call_command("sync_dags", dir=str(tmp_path), stdout=io.StringIO(), stderr=err)
    assert "cycle: " in err.getvalue() and "previous version kept" in err.getvalue()
    dag.refresh_from_db()
    assert dag.version == 1
    (tmp_path / "p.yaml").write_text(
        f"tenant: {tenant.slug}\ndag: pipeline\ntasks:\n"
        "  - id: only\n    handler: {type: python, callable: noop}\n"
    )
    (tmp_path / "p.json").unlink()
    call_command("sync_dags", dir=str(tmp_path), stdout=io.StringIO())
    dag.refresh_from_db()
    assert dag.version == 2


def test_shipped_definitions_are_valid(tenant, settings):
    settings.DAG_FILES_TENANT = tenant.slug
    out = io.StringIO()
    call_command("sync_dags", stdout=out, stderr=out)
    assert "invalid" not in out.getvalue(), out.getvalue()
    assert Dag.platform.filter(tenant=tenant).count() >= 2


def test_a_dag_bomb_at_the_body_limit_is_a_400_and_nothing_is_stored(api):
    import json

    from tests.dag_bomb import dense_dag

    bomb = dense_dag(nodes=2000, body_bytes=1024 * 1024 - 1024)
    body = json.dumps(bomb)
    assert len(body) <= 1024 * 1024
    response = api.post("/api/v1/dags", body, content_type="application/json")
    assert response.status_code == 400
    assert "dependencies" in response.json()["message"]
    assert response.json()["field"].endswith("].depends_on")
    assert not Dag.platform.exists()


def test_a_dag_takes_a_tasks_scheduling_policy_object(api):
    policy = {
        "catchup": "all",
        "overlap": "skip",
        "jitter_seconds": 30,
        "start_at": "2030-01-01T00:00:00Z",
        "end_at": "2030-02-01T00:00:00Z",
        "pause_after_failures": 3,
        "health_check": {
            "url": "https://status.example.com/health",
            "expect_status": 204,
            "timeout_seconds": 2,
        },
        "remaining_runs": 10,
    }
    schedule = {"type": "cron", "expression": "*/5 * * * *"}
    created = api.post("/api/v1/dags", definition(schedule=schedule, policy=policy), format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["policy"] == policy
    assert (body["catchup"], body["overlap"]) == ("all", "skip")
    # The first fire is inside the window, moved by at most the jitter.
    assert "2030-01-01T00:00:00Z" <= body["next_fire_at"] <= "2030-01-01T00:00:30Z"
    bad = api.post(
        "/api/v1/dags",
        definition("other", schedule=schedule, policy={"jitter_seconds": 300}),
        format="json",
    )
    assert bad.status_code == 400 and "policy.jitter_seconds" in str(bad.json())
