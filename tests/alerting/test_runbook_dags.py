"""The runbook for DAGs: a DAG whose runs fail pause_after_failures times in a row is checked,
retried once with a new DAG run (trigger "runbook") or paused (`dag_set_paused`, paused_by
"runbook") with its owner told. Runs end through the worker's finish path; the runbook's
messages are drained from real Redis as a worker would."""

from __future__ import annotations

import pytest

from alerting.services.channels import notification_channel_create
from dags.models import Dag, DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.models import AuditEntry
from scheduler_app.services.claims import execution_claim
from tests.alerting.test_notifications import drain
from tests.alerting.test_runbook import HealthEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner_hook(tenant, receiver):
    return notification_channel_create(
        tenant=tenant, name="dag-owner", kind="webhook", target=receiver.url + "/owner"
    )


def failing_dag(tenant, **policy) -> Dag:
    return dag_create(
        tenant=tenant,
        raw={
            "dag": "nightly-etl",
            "owner": "dag-owner",
            "policy": {"pause_after_failures": 2, **policy},
            "tasks": [
                {
                    "id": "extract",
                    "handler": {"type": "python", "callable": "noop"},
                    "retry_policy": {"max_attempts": 1},
                }
            ],
        },
    )


def end_dag_run(run: DagRun, status: str, capture) -> DagRun:
    execution_id = DagNodeState.objects.get(run=run, node_id="extract").execution_id
    claim = execution_claim(execution_id=execution_id, worker_id="w1", lease_seconds=30)
    with capture(execute=True):
        report = run_finish(
            claim=claim,
            outcome=HandlerOutcome(status, transient=False, error_class="boom"),
        )
    assert report.accepted
    run.refresh_from_db()
    return run


def fail_runs(dag: Dag, times: int, capture) -> None:
    for _ in range(times):
        assert end_dag_run(dag_trigger(dag=dag), "failed", capture).status == "failed"


def runbook_notices(receiver) -> list[dict]:
    return [b for b in receiver.bodies("/owner") if b["event"] == "runbook_paused"]


def test_n_failed_dag_runs_pause_the_dag_and_tell_its_owner(
    tenant, owner_hook, receiver, notify_settings, django_capture_on_commit_callbacks
):
    dag = failing_dag(tenant)
    fail_runs(dag, 1, django_capture_on_commit_callbacks)
    assert Dag.platform.get(id=dag.id).consecutive_failures == 1
    drain(notify_settings)
    assert not Dag.platform.get(id=dag.id).paused  # one failure: below the threshold

    fail_runs(dag, 1, django_capture_on_commit_callbacks)
    drain(notify_settings)
    dag.refresh_from_db()
    assert dag.paused and dag.paused_by == "runbook"
    assert dag.pause_note.startswith("paused by the runbook after 2 consecutive failures; ")
    assert "no health check is configured" in dag.pause_note
    [notice] = runbook_notices(receiver)
    assert notice["dag_id"] == str(dag.id) and notice["url"].endswith(f"/dashboard/dags/{dag.id}")
    assert AuditEntry.platform.filter(
        tenant=tenant, actor="runbook", object_id=str(dag.id)
    ).exists()


def test_a_successful_dag_run_resets_the_count(
    tenant, owner_hook, notify_settings, django_capture_on_commit_callbacks
):
    dag = failing_dag(tenant)
    fail_runs(dag, 1, django_capture_on_commit_callbacks)
    run = end_dag_run(dag_trigger(dag=dag), "success", django_capture_on_commit_callbacks)
    assert run.status == "success"
    assert Dag.platform.get(id=dag.id).consecutive_failures == 0
    fail_runs(dag, 1, django_capture_on_commit_callbacks)
    drain(notify_settings)
    assert not Dag.platform.get(id=dag.id).paused


def test_a_healthy_dag_is_rerun_once_then_paused_when_that_run_fails(
    tenant, owner_hook, receiver, notify_settings, django_capture_on_commit_callbacks
):
    health = HealthEndpoint()
    try:
        dag = failing_dag(tenant, health_check={"url": health.url})
        fail_runs(dag, 2, django_capture_on_commit_callbacks)
        drain(notify_settings)
        [retry] = DagRun.platform.filter(dag=dag, trigger="runbook")
        assert not Dag.platform.get(id=dag.id).paused and runbook_notices(receiver) == []

        assert end_dag_run(retry, "failed", django_capture_on_commit_callbacks).status == "failed"
        drain(notify_settings)
        dag.refresh_from_db()
        assert dag.paused and dag.paused_by == "runbook"
        assert dag.pause_note == (
            "paused by the runbook after 3 consecutive failures; the runbook's retry failed"
        )
        assert DagRun.platform.filter(dag=dag, trigger="runbook").count() == 1
        assert health.paths == ["/health"]
        assert len(runbook_notices(receiver)) == 1
    finally:
        health.server.shutdown()
