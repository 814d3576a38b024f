"""Singleton and debounce on DAG nodes (issue 29, item 4): a node started while its key has a
run joins that run and ends with its outcome; debounced starts collapse into one pending run
with the last parameters; a stopped run keeps a chain another run joined; bad blocks are a 400
naming the node's field. Driven through the engine's own entries on real PostgreSQL: the
trigger, the worker's claim and finish (`runs.finish`), the beat's promote."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from dags.models import DagNodeJoin, DagNodeState, DagRun
from dags.services.definitions import dag_create
from dags.services.runs import dag_run_cancel, dag_trigger
from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TaskExecution
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.firing import due_pending_promote
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}


def _dag(tenant, **flow):
    return dag_create(
        tenant=tenant,
        raw={
            "dag": "sync",
            "tasks": [
                {"id": "fetch", "handler": NOOP, **flow},
                {"id": "report", "handler": NOOP, "depends_on": ["fetch"]},
            ],
        },
    )


def _state(run, node_id="fetch") -> DagNodeState:
    return DagNodeState.objects.get(run=run, node_id=node_id)


def _node_runs(run, node_id="fetch"):
    return TaskExecution.platform.filter(task_id=run.version.node_tasks[node_id])


def _finish(execution_id, status="success", result=None) -> None:
    claim = execution_claim(execution_id=execution_id, worker_id="w@host", lease_seconds=60)
    assert claim is not None
    failed = status != "success"  # a permanent failure: no retry of the attempt
    outcome = HandlerOutcome(
        status, result=result, error_message="boom" if failed else "", transient=not failed
    )
    report = run_finish(
        execution_id=claim.execution.id, claim_token=claim.claim_token, outcome=outcome
    )
    assert report.accepted


def test_a_singleton_node_of_a_second_run_joins_the_first_runs_execution_and_ends_with_it(
    tenant,
):
    dag = _dag(tenant, singleton={"key": "{{ parameters.customer }}"})
    first = dag_trigger(dag=dag, parameters={"customer": "c1"})
    second = dag_trigger(dag=dag, parameters={"customer": "c1"})
    other = dag_trigger(dag=dag, parameters={"customer": "c2"})

    shared = _state(first).execution_id
    assert _node_runs(first).count() == 2  # c1's and c2's: the second run made none
    assert _state(second).execution_id == shared and _state(second).status == "queued"
    assert _state(other).execution_id != shared
    row = TaskExecution.platform.get(id=shared)
    assert row.singleton_key == "c1" and row.trigger_count == 2
    assert DagNodeJoin.objects.filter(execution_root_id=shared, run=second).exists()

    _finish(shared, result={"rows": 7})
    for run in (first, second):
        assert _state(run).status == "success"
        assert _state(run).result == {"rows": 7}
        assert _state(run, "report").status == "queued"  # each run moves on
    assert _state(other).status == "queued"  # another key: its own run, untouched

    # The key's run has ended: the next start of the key makes a run again.
    again = dag_trigger(dag=dag, parameters={"customer": "c1"})
    assert _state(again).execution_id not in (shared, None)
    assert _node_runs(first).count() == 3


def test_a_joined_singleton_node_takes_a_failure_as_its_own(tenant):
    dag = _dag(tenant, singleton={"key": "{{ dag }}"})
    first, second = dag_trigger(dag=dag), dag_trigger(dag=dag)
    assert TaskExecution.platform.get(id=_state(first).execution_id).singleton_key == "sync"
    _finish(_state(first).execution_id, status="failed")
    for run in (first, second):
        assert _state(run).status == "failed"
        assert _state(run, "report").status == "upstream_failed"
        assert DagRun.platform.get(id=run.id).status == "failed"


def test_debounced_node_starts_collapse_into_one_pending_run_with_the_last_parameters(tenant):
    dag = _dag(tenant, debounce={"key": "{{ dag }}", "seconds": 30})
    runs = [dag_trigger(dag=dag, parameters={"batch": n}) for n in (1, 2, 3)]

    (pending,) = _node_runs(runs[0])
    assert pending.status == "pending" and pending.debounce_key == "sync"
    assert pending.parameters == {"batch": 3} and pending.trigger_count == 3
    # Due a window after the last start; at the latest ten windows after the first.
    assert pending.scheduled_at > pending.created_at + timedelta(seconds=29)
    assert round((pending.debounce_until - pending.created_at).total_seconds()) == 300
    assert {_state(run).execution_id for run in runs} == {pending.id}
    assert {_state(run).status for run in runs} == {"pending"}

    # Not before its window: the beat's promote leaves it; once due, it rings it. (The
    # window is made to have passed by moving the row's time, not by waiting for it.)
    assert due_pending_promote(now=pending.scheduled_at - timedelta(seconds=1), limit=10) == []
    TaskExecution.platform.filter(id=pending.id).update(
        scheduled_at=timezone.now() - timedelta(seconds=1)
    )
    (bell,) = due_pending_promote(now=timezone.now(), limit=10)
    assert bell.execution_id == str(pending.id)
    _finish(pending.id, result={"done": 3})
    assert [_state(run).result for run in runs] == [{"done": 3}] * 3
    assert {_state(run, "report").status for run in runs} == {"queued"}

    # The window closed with the run's start: the next start opens a new one.
    later = dag_trigger(dag=dag, parameters={"batch": 4})
    assert _state(later).execution_id != pending.id and _node_runs(later).count() == 2


def test_cancelling_the_run_that_started_a_joined_chain_keeps_it_for_the_joiner(tenant):
    dag = _dag(tenant, singleton={"key": "{{ dag }}"})
    first, second = dag_trigger(dag=dag), dag_trigger(dag=dag)
    shared = _state(first).execution_id
    dag_run_cancel(run=first)
    assert _state(first).status == "cancelled"
    assert TaskExecution.platform.get(id=shared).status == "queued"  # kept for the second
    _finish(shared)
    assert _state(second).status == "success"
    assert DagRun.platform.get(id=first.id).status == "cancelled"  # the first stays ended

    # Nobody joined this one: a cancel cancels its chain as before.
    alone = dag_trigger(dag=dag)
    dag_run_cancel(run=alone)
    assert TaskExecution.platform.get(id=_state(alone).execution_id).status == "cancelled"


@pytest.mark.parametrize(
    ("node", "field"),
    [
        ({"debounce": {"seconds": 0}}, "tasks[1].debounce.seconds"),
        ({"debounce": {"key": "k"}}, "tasks[1].debounce.seconds"),
        ({"debounce": {"seconds": 5, "max_wait_seconds": 2}}, "tasks[1].debounce.max_wait_seconds"),
        ({"singleton": {"key": "{{ secret:db }}"}}, "tasks[1].singleton.key"),
        ({"singleton": {"key": "{{ env.HOME }}"}}, "tasks[1].singleton.key"),
        ({"singleton": {"key": ""}}, "tasks[1].singleton.key"),
        ({"singleton": {"name": "x"}}, "tasks[1].singleton.name"),
        ({"singleton": "yes"}, "tasks[1].singleton"),
        ({"singleton": {}, "debounce": {"seconds": 5}}, "tasks[1].debounce"),
        ({"singleton": {}, "map_over": [1, 2]}, "tasks[1].singleton"),
    ],
)
def test_a_bad_singleton_or_debounce_of_a_node_is_refused_naming_it(tenant, node, field):
    raw = {
        "dag": "bad",
        "tasks": [{"id": "a", "handler": NOOP}, {"id": "b", "handler": NOOP, **node}],
    }
    with pytest.raises(ValidationFailed) as error:
        dag_create(tenant=tenant, raw=raw)
    assert error.value.field == field


def test_a_node_naming_a_task_or_waiting_takes_no_singleton(tenant):
    make_task(tenant, name="shared", schedule={"type": "manual"})
    for node, field in (
        ({"task": "shared", "singleton": {}}, "tasks[0].singleton"),
        ({"wait_for_event": {"name": "go"}, "debounce": {"seconds": 5}}, "tasks[0].debounce"),
    ):
        with pytest.raises(ValidationFailed) as error:
            dag_create(tenant=tenant, raw={"dag": "bad", "tasks": [{"id": "a", **node}]})
        assert error.value.field == field


def test_the_api_answers_a_bad_node_debounce_with_a_400_and_saves_nothing(api):
    raw = {
        "dag": "etl",
        "tasks": [
            {"id": "a", "handler": NOOP},
            {"id": "b", "handler": NOOP},
            {"id": "c", "handler": NOOP, "debounce": {"key": "{{ dag }}", "seconds": -1}},
        ],
    }
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "tasks[2].debounce.seconds"
    assert api.get("/api/v1/dags").json()["count"] == 0
    raw["tasks"][2]["debounce"]["seconds"] = 30
    assert api.post("/api/v1/dags", raw, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_twenty_runs_started_at_once_share_one_run_of_a_singleton_node(tenant):
    """Threads on their own connections, released together: the key's advisory lock makes
    each later start see the first one's committed run."""
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "hot",
            "max_active_runs": 100,
            "tasks": [{"id": "fetch", "handler": NOOP, "singleton": {}}],
        },
    )
    threads, barrier = 4, threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(5):
                dag_trigger(dag=dag)
        except BaseException as error:  # surfaced by the test thread
            errors.append(error)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=start) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors, errors
    runs = list(DagRun.platform.filter(dag=dag))
    assert len(runs) == 20
    (only,) = _node_runs(runs[0])
    assert only.trigger_count == 20 and only.singleton_key == "fetch"  # {{ task }}: the node
    assert {_state(run).execution_id for run in runs} == {only.id}
    assert DagNodeJoin.objects.filter(execution_root_id=only.id).count() == 19
