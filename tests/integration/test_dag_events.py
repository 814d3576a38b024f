"""wait_for_event nodes on real workers: an event releases a waiting node and its payload
reaches the branch; a wait past its timeout ends timed_out under the failure policy."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun, Event, EventWait
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = {"type": "python", "callable": "upstream_echo"}


def _state(run, node_id):
    return DagNodeState.objects.get(run=run, node_id=node_id)


def _wait_for_end(run, *processes, timeout=60):
    try:
        wait_until(
            lambda: DagRun.platform.get(id=run.id).status not in ("running", "queued"),
            timeout=timeout,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(*processes))
        raise
    run.refresh_from_db()
    return run


def test_an_event_releases_the_waiting_node_and_its_payload_picks_the_branch(
    tenant_and_user, api, client, live_worker
):
    tenant, user = tenant_and_user
    client.force_login(user)
    # Posted before the run started: it does not count.
    api.post("/api/v1/events", {"name": "file.landed", "payload": {"bucket": "in"}}, format="json")
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "ingest",
            "tasks": [
                {"id": "prepare", "handler": ECHO},
                {
                    "id": "landed",
                    "depends_on": ["prepare"],
                    "wait_for_event": {
                        "name": "file.landed",
                        "match": {"bucket": "in"},
                        "timeout_seconds": 120,
                    },
                },
                {
                    "id": "load-csv",
                    "handler": ECHO,
                    "depends_on": ["landed"],
                    "condition": {"path": "$.landed.result.kind", "equals": "csv"},
                },
                {
                    "id": "load-json",
                    "handler": ECHO,
                    "depends_on": ["landed"],
                    "condition": {"field": "landed.result.kind", "equals": "json"},
                },
            ],
        },
    )
    run = dag_trigger(dag=dag)
    wait_until(
        lambda: _state(run, "landed").status == "waiting_for_event",
        timeout=30,
        message="the node to wait for its event",
    )
    assert _state(run, "landed").execution_id is None  # nothing runs, no worker slot
    detail = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").json()
    assert [(w["node_id"], w["status"]) for w in detail["event_waits"]] == [("landed", "waiting")]
    page = client.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'id="event-waits"' in page and 'data-wait-status="waiting"' in page
    assert 'data-state="waiting_for_event"' in page
    # Another bucket: not a match.
    other = api.post(
        "/api/v1/events", {"name": "file.landed", "payload": {"bucket": "out"}}, format="json"
    )
    assert other.status_code == 201 and other.json()["released"] == []
    assert _state(run, "landed").status == "waiting_for_event"

    payload = {"bucket": "in", "kind": "csv", "path": "in/2026-12-01.csv"}
    posted = api.post("/api/v1/events", {"name": "file.landed", "payload": payload}, format="json")
    assert posted.status_code == 201
    assert posted.json()["released"] == [{"dag_run_id": str(run.id), "node_id": "landed"}]
    run = _wait_for_end(run, live_worker)
    assert run.status == "success"
    assert _state(run, "landed").status == "success"
    assert _state(run, "landed").result == payload
    assert _state(run, "load-csv").status == "success"
    assert _state(run, "load-csv").result["upstream"] == {"landed": payload}
    assert _state(run, "load-json").status == "skipped"
    wait = EventWait.platform.get(run=run, node_id="landed")
    assert wait.status == "received" and str(wait.event_id) == posted.json()["id"]
    page = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").json()
    assert page["event_waits"][0]["event_id"] == posted.json()["id"]
    html = client.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'data-wait-status="received"' in html and posted.json()["id"] in html
    assert "in/2026-12-01.csv" in html  # the payload that released it


def test_a_wait_past_its_timeout_ends_timed_out_and_the_policy_applies(tenant, live_worker, beats):
    beat = beats("solo")  # its housekeeping ends expired waits
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "impatient",
            "failure_policy": "skip_downstream",
            "tasks": [
                {
                    "id": "approval",
                    "wait_for_event": {"name": "approved", "match": {}, "timeout_seconds": 2},
                },
                {"id": "ship", "handler": ECHO, "depends_on": ["approval"]},
                {
                    "id": "notify",
                    "handler": ECHO,
                    "depends_on": ["approval"],
                    "trigger_rule": "all_done",
                },
            ],
        },
    )
    run = dag_trigger(dag=dag)
    run = _wait_for_end(run, live_worker, beat)
    assert _state(run, "approval").status == "timed_out"
    assert "within 2 s" in _state(run, "approval").error_message
    assert _state(run, "ship").status == "upstream_failed"
    assert _state(run, "notify").status == "success"
    assert run.status == "partially_completed"
    assert EventWait.platform.get(run=run).status == "timed_out"
    assert not Event.platform.exists()


def test_an_event_schedule_starts_a_run_with_the_payload_as_parameters(tenant, api, live_worker):
    created = api.post(
        "/api/v1/tasks",
        {
            "name": "on-upload",
            "schedule": {"type": "event", "name": "file.landed", "match": {"bucket": "in"}},
            "handler": {"type": "python", "callable": "echo"},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["schedule"] == {
        "type": "event",
        "name": "file.landed",
        "match": {"bucket": "in"},
    }
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "on-upload-dag",
            "schedule": {"type": "event", "name": "file.landed"},
            "tasks": [{"id": "echo", "handler": ECHO}],
        },
    )
    ignored = api.post(
        "/api/v1/events", {"name": "file.landed", "payload": {"bucket": "out"}}, format="json"
    ).json()
    assert [s.get("dag_id") for s in ignored["started"]] == [str(dag.id)]  # match: {} (any)
    payload = {"bucket": "in", "path": "in/a.csv"}
    posted = api.post(
        "/api/v1/events", {"name": "file.landed", "payload": payload}, format="json"
    ).json()
    started = {("task" if "task_id" in s else "dag"): s for s in posted["started"]}
    assert set(started) == {"task", "dag"}
    from scheduler_app.models import TaskExecution

    execution_id = started["task"]["execution_id"]
    wait_until(
        lambda: TaskExecution.platform.get(id=execution_id).status == "success",
        timeout=30,
        message="the event-started run to succeed",
    )
    execution = TaskExecution.platform.get(id=execution_id)
    assert execution.trigger == "event" and execution.result == payload
    run = _wait_for_end(DagRun.platform.get(id=started["dag"]["dag_run_id"]), live_worker)
    assert run.status == "success" and run.trigger == "event"
    assert _state(run, "echo").result == {**payload, "upstream": {}}
    assert TaskExecution.platform.filter(task_id=created.json()["id"]).count() == 1
